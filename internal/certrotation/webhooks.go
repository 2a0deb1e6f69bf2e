package certrotation

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// Webhooks is where the trust bundle is published: every webhook's
// caBundle, and beside them the operator's record of the CAs it made.
type Webhooks interface {
	// Publish writes bundle into every webhook's caBundle, and then record
	// as the record.
	Publish(ctx context.Context, bundle []byte, record Record) error
	// Read returns what the apiserver stores now, not a cached copy.
	Read(ctx context.Context) (Stored, error)
}

// Stored is what the webhook configurations hold.
type Stored struct {
	// CABundles holds each webhook's caBundle, and an empty one for a
	// configuration that is missing or has no webhook: no CA is in all of
	// them until both configurations trust it.
	CABundles [][]byte
	// Record is the record as written; HasRecord is false when there is none.
	Record    string
	HasRecord bool
}

// WebhookConfigurations publishes into the operator's two webhook
// configurations and keeps the record in the annotation
// v1alpha1.AnnotationCAFingerprints of the mutating one.
//
// Why there: the record decides which CAs in the certificate Secret the
// operator made. Anyone who can write that Secret can write its
// annotations, so a record in the Secret would protect nothing. Only the
// operator (update by name) and those who hold update on webhook
// configurations, cluster administrators, write the configuration; such a
// user can already set any caBundle or point the webhook anywhere, so
// trusting what they record gives nothing away. Record says what this does
// and does not protect against.
type WebhookConfigurations struct {
	// Client writes; Reader reads from the apiserver, not a cache, so that
	// what was just written is read back.
	Client client.Client
	Reader client.Reader
	// Mutating and Validating name the configurations.
	Mutating, Validating string
	// Ensure brings both configurations to what they should be with
	// caBundle bundle; c reads from the apiserver.
	Ensure func(ctx context.Context, c client.Client, bundle []byte) error
}

// liveReads is a client whose reads go to the apiserver.
type liveReads struct {
	client.Client
	reader client.Reader
}

func (c liveReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.reader.Get(ctx, key, obj, opts...)
}

// Publish writes the caBundles, then the record. The rotator writes the
// Secret only once Publish has succeeded, so the record names a new CA
// before the Secret holds it. A CA being revoked leaves the record only after
// every caBundle: if the second write fails, it is still the operator's and
// dropped again on the retry, not reported as foreign.
func (w *WebhookConfigurations) Publish(ctx context.Context, bundle []byte, record Record) error {
	if err := w.Ensure(ctx, liveReads{Client: w.Client, reader: w.Reader}, bundle); err != nil {
		return err
	}
	var m admissionv1.MutatingWebhookConfiguration
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: w.Mutating}, &m); err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", w.Mutating, err)
	}
	if have, ok := m.Annotations[v1alpha1.AnnotationCAFingerprints]; ok && have == record.String() {
		return nil
	}
	metav1.SetMetaDataAnnotation(&m.ObjectMeta, v1alpha1.AnnotationCAFingerprints, record.String())
	if err := w.Client.Update(ctx, &m); err != nil {
		return fmt.Errorf("recording the CAs on MutatingWebhookConfiguration %s: %w", w.Mutating, err)
	}
	return nil
}

// Read stands an empty caBundle in for a configuration that is missing or
// has no webhook: no CA is in every caBundle until both configurations hold it.
func (w *WebhookConfigurations) Read(ctx context.Context) (Stored, error) {
	var st Stored
	var m admissionv1.MutatingWebhookConfiguration
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: w.Mutating}, &m); client.IgnoreNotFound(err) != nil {
		return st, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", w.Mutating, err)
	}
	var v admissionv1.ValidatingWebhookConfiguration
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: w.Validating}, &v); client.IgnoreNotFound(err) != nil {
		return st, fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", w.Validating, err)
	}
	st.Record, st.HasRecord = m.Annotations[v1alpha1.AnnotationCAFingerprints]
	mutating := [][]byte{}
	for _, wh := range m.Webhooks {
		mutating = append(mutating, wh.ClientConfig.CABundle)
	}
	validating := [][]byte{}
	for _, wh := range v.Webhooks {
		validating = append(validating, wh.ClientConfig.CABundle)
	}
	st.CABundles = append(orEmpty(mutating), orEmpty(validating)...)
	return st, nil
}

func orEmpty(caBundles [][]byte) [][]byte {
	if len(caBundles) == 0 {
		return [][]byte{nil}
	}
	return caBundles
}
