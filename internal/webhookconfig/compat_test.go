package webhookconfig

import (
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/sidecar-operator/sidecar-operator/internal/version"
)

// TestPoliciesCompileOnTheOldestSupportedMinor compiles every expression of
// every policy the operator ships as the oldest supported apiserver compiles a
// new one: with the CEL libraries of its compatibility version, one minor
// below its own (a 1.34 apiserver has no ext.Lists .flatten(), which came at
// 1.34). The apiserver refuses a policy that does not compile there, and the
// operator would never publish it.
func TestPoliciesCompileOnTheOldestSupportedMinor(t *testing.T) {
	major, minor, _ := strings.Cut(version.MinKubernetes, ".")
	ma, _ := strconv.Atoi(major)
	mi, _ := strconv.Atoi(minor)
	compat := utilversion.MajorMinor(uint(ma), uint(mi-1))
	author, _ := AuthorPolicy()
	grants, _ := GrantPolicy("sidecar-operator-system")
	mandatory, _ := MandatoryPolicy("sidecar-operator-system")
	mandatoryAuthors, _ := MandatoryAuthorsPolicy()
	for _, policy := range []*admissionv1.ValidatingAdmissionPolicy{author, grants, mandatory, mandatoryAuthors} {
		t.Run(policy.Name, func(t *testing.T) {
			compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(compat))
			if err != nil {
				t.Fatal(err)
			}
			opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true, HasParams: policy.Spec.ParamKind != nil}
			for _, v := range policy.Spec.Variables {
				if r := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.NewExpressions); r.Error != nil {
					t.Errorf("variable %s: %v", v.Name, r.Error)
				}
			}
			var exprs []plugincel.ExpressionAccessor
			for _, c := range policy.Spec.MatchConditions {
				exprs = append(exprs, &validating.ValidationCondition{Expression: c.Expression})
			}
			for _, v := range policy.Spec.Validations {
				exprs = append(exprs, &validating.ValidationCondition{Expression: v.Expression})
				if v.MessageExpression != "" {
					exprs = append(exprs, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
				}
			}
			for _, a := range policy.Spec.AuditAnnotations {
				exprs = append(exprs, &validating.ValidationCondition{Expression: a.ValueExpression})
			}
			for i, e := range exprs {
				if r := compiler.CompileCondition([]plugincel.ExpressionAccessor{e}, opts, environment.NewExpressions); len(r.CompilationErrors()) > 0 {
					t.Errorf("expression %d (%.80s): %v", i, e.GetExpression(), r.CompilationErrors())
				}
			}
		})
	}
}
