package admissionchain

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Load lists the cluster's MutatingWebhookConfigurations,
// MutatingAdmissionPolicies and their bindings: admissionregistration.k8s.io/v1,
// or else v1beta1, which a 1.34 or 1.35 apiserver may serve. What it cannot
// list (neither served, or a user who may not list them) it says in Notes,
// since the chain is an aid to the report, not its point.
func Load(ctx context.Context, c client.Reader) Objects {
	var o Objects
	var webhooks admissionv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &webhooks); err != nil {
		o.Notes = append(o.Notes, fmt.Sprintf("MutatingWebhookConfigurations not listed: %v", err))
	} else {
		o.Webhooks = webhooks.Items
	}
	policies, bindings, err := listPolicies(ctx, c)
	switch {
	case err == nil:
		o.Policies, o.Bindings = policies, bindings
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		beta, betaBindings, betaErr := listBetaPolicies(ctx, c)
		switch {
		case betaErr == nil:
			o.Policies, o.Bindings = beta, betaBindings
			o.Notes = append(o.Notes, "MutatingAdmissionPolicies listed from admissionregistration.k8s.io/v1beta1: "+
				"this apiserver does not serve v1, which Kubernetes serves from 1.36")
		case meta.IsNoMatchError(betaErr) || apierrors.IsNotFound(betaErr):
			o.Notes = append(o.Notes, "this apiserver serves MutatingAdmissionPolicies neither at admissionregistration.k8s.io/v1 "+
				"(Kubernetes 1.36 and later) nor at v1beta1 (1.34 and 1.35, with the MutatingAdmissionPolicy feature gate and "+
				"--runtime-config), so it runs none and none are listed")
		default:
			o.Notes = append(o.Notes, fmt.Sprintf("MutatingAdmissionPolicies not listed: %v", betaErr))
		}
	default:
		o.Notes = append(o.Notes, fmt.Sprintf("MutatingAdmissionPolicies not listed: %v", err))
	}
	return o
}

func listPolicies(ctx context.Context, c client.Reader) ([]admissionv1.MutatingAdmissionPolicy, []admissionv1.MutatingAdmissionPolicyBinding, error) {
	var policies admissionv1.MutatingAdmissionPolicyList
	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := c.List(ctx, &policies); err != nil {
		return nil, nil, err
	}
	if err := c.List(ctx, &bindings); err != nil {
		return nil, nil, err
	}
	return policies.Items, bindings.Items, nil
}

// listBetaPolicies lists the v1beta1 policies of a 1.34 or 1.35 apiserver
// as v1: the two versions' fields are the same (v1 is v1beta1 promoted).
func listBetaPolicies(ctx context.Context, c client.Reader) ([]admissionv1.MutatingAdmissionPolicy, []admissionv1.MutatingAdmissionPolicyBinding, error) {
	var policies admissionv1beta1.MutatingAdmissionPolicyList
	var bindings admissionv1beta1.MutatingAdmissionPolicyBindingList
	if err := c.List(ctx, &policies); err != nil {
		return nil, nil, err
	}
	if err := c.List(ctx, &bindings); err != nil {
		return nil, nil, err
	}
	var out admissionv1.MutatingAdmissionPolicyList
	var outBindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := convert(&policies, &out); err != nil {
		return nil, nil, err
	}
	if err := convert(&bindings, &outBindings); err != nil {
		return nil, nil, err
	}
	return out.Items, outBindings.Items, nil
}

func convert(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, to)
}
