package webhook

// The webhook's identity, ClusterRole sidecar-operator-webhook (make
// generate): the webhook process (run --component webhook) reads the
// Sidecars it compiles, namespace labels, the MutatingWebhookConfiguration
// whose caBundle its readiness checks, and in its own namespace the signing
// key and its certificate; it writes nothing but Events, and authenticates
// and authorizes the callers of its metrics port through the apiserver. Its
// two Secrets it gets by name (and polls: it may list and watch none), so
// --signing-key-secret and --cert-secret need this changed. The revisions
// a rollout still serves it reads from the ControllerRevisions there.
// +kubebuilder:rbac:groups=sidecar-operator.io,resources=sidecars,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=list;watch,resourceNames=sidecar-operator
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups="",namespace=sidecar-operator-system,resources=secrets,verbs=get,resourceNames=sidecar-operator-signing-key;sidecar-operator-certs
// +kubebuilder:rbac:groups=apps,namespace=sidecar-operator-system,resources=controllerrevisions,verbs=list;watch
