package admissionchain

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Load lists the cluster's MutatingWebhookConfigurations,
// MutatingAdmissionPolicies and their bindings. What it cannot list (an
// apiserver that does not serve admissionregistration.k8s.io/v1
// MutatingAdmissionPolicies, or a user who may not list them) it says in
// Notes, since the chain is an aid to the report, not its point.
func Load(ctx context.Context, c client.Reader) Objects {
	var o Objects
	var webhooks admissionv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &webhooks); err != nil {
		o.Notes = append(o.Notes, fmt.Sprintf("MutatingWebhookConfigurations not listed: %v", err))
	} else {
		o.Webhooks = webhooks.Items
	}
	var policies admissionv1.MutatingAdmissionPolicyList
	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	err := c.List(ctx, &policies)
	if err == nil {
		err = c.List(ctx, &bindings)
	}
	switch {
	case err == nil:
		o.Policies, o.Bindings = policies.Items, bindings.Items
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		o.Notes = append(o.Notes, "this apiserver does not serve MutatingAdmissionPolicies (admissionregistration.k8s.io/v1), so none are listed")
	default:
		o.Notes = append(o.Notes, fmt.Sprintf("MutatingAdmissionPolicies not listed: %v", err))
	}
	return o
}
