package v1alpha1

// Every label, annotation and finalizer key the operator reads or writes
// that a user may see or set.

// Pod annotation and label keys that make up the injection contract.
const (
	// AnnotationInject lists, comma-separated, Sidecars a pod requests by name.
	AnnotationInject = "sidecar-operator.io/inject"
	// AnnotationSkip vetoes injection: a comma-separated list of names, or "*".
	AnnotationSkip = "sidecar-operator.io/skip"

	// MandatoryPolicyName names the ValidatingAdmissionPolicy, and its
	// binding, with which the apiserver denies pods lacking a mandatory
	// Sidecar that selects them.
	MandatoryPolicyName = "sidecar-operator-mandatory"
	// AnnotationStatus records what was injected, as InjectionStatus JSON.
	AnnotationStatus = "sidecar-operator.io/status"
	// RecordGuarded and RecordUnguarded are how the webhook writes an
	// injection record's guarded field (InjectionRecord.Guarded) in
	// AnnotationStatus. The apiserver sends a pod to /validate-pods when
	// the annotation holds RecordGuarded, or does not hold RecordUnguarded
	// (records from before the field): substrings, so that a matchCondition
	// and a policy can test them.
	RecordGuarded   = `"guarded":true`
	RecordUnguarded = `"guarded":false`
	// LabelInjected is set to "true" on every pod that received a sidecar.
	LabelInjected = "sidecar-operator.io/injected"
	// AnnotationRevisionPrefix followed by a Sidecar's name pins a pod to
	// one of the two revisions the Sidecar serves (status.currentRevision
	// or status.updateRevision).
	AnnotationRevisionPrefix = "sidecar-operator.io/revision."
	// MaxSidecarName is the longest Sidecar name: the name part of
	// AnnotationRevisionPrefix + name is at most 63 characters.
	MaxSidecarName = 63 - len("revision.")
)

// Namespace labels.
const (
	// LabelWebhook set to "disabled" keeps the injection webhook out of a namespace.
	LabelWebhook = "sidecar-operator.io/webhook"
	// LabelValidation set to "disabled" turns pod validation off in a
	// namespace; such a namespace gets no grants either.
	LabelValidation = "sidecar-operator.io/validation"
	// LabelVerify marks the objects `sidecar-operator verify --workload` creates, to find and delete them.
	LabelVerify = "sidecar-operator.io/verify"
)

// Keys on the objects the operator makes.
const (
	// LabelManagedBy set to ManagedBy marks every object the operator owns.
	// An object of the same name without it was made by someone else and is
	// never taken over.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value on the operator's objects.
	ManagedBy = "sidecar-operator"
	// LabelSidecar names the Sidecar an RBAC object was made for.
	LabelSidecar = "sidecar-operator.io/sidecar"
	// FinalizerRBAC holds a Sidecar that grants RBAC until its objects are gone.
	FinalizerRBAC = "sidecar-operator.io/rbac"
	// LabelPullSecretCopy marks the Secrets the operator copied.
	LabelPullSecretCopy = "sidecar-operator.io/pull-secret-copy"
	// AnnotationCopiedFrom on a copy names its source, namespace/name.
	AnnotationCopiedFrom = "sidecar-operator.io/copied-from"
	// AnnotationCopiedDigest on a copy is the SHA-256 of its source's type
	// and data when copied: the operator caches no Secret's data to compare.
	AnnotationCopiedDigest = "sidecar-operator.io/copied-digest"
	// AnnotationRotate on the operator's certificate or signing key Secret
	// asks for a rotation: "ca", "ca-revoke" (a new CA, and the older ones
	// dropped once the serving certificate has moved to it) or "leaf" on the
	// certificate Secret, "key" on the signing key Secret.
	AnnotationRotate = "sidecar-operator.io/rotate"
	// AnnotationCAFingerprints on the operator's MutatingWebhookConfiguration
	// records the SHA-256 fingerprints of the webhook CAs the operator made;
	// only those are published into the caBundles. It is there, not on the
	// certificate Secret, because only the operator and cluster administrators
	// write webhook configurations.
	AnnotationCAFingerprints = "sidecar-operator.io/ca-fingerprints"
)
