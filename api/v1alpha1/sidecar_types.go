package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MissingParametersPolicy says what happens to a pod that lacks a required parameter.
// +kubebuilder:validation:Enum=Reject;Skip
type MissingParametersPolicy string

const (
	// MissingParametersReject denies the pod, naming every missing annotation.
	MissingParametersReject MissingParametersPolicy = "Reject"
	// MissingParametersSkip admits the pod without this Sidecar, with a warning.
	MissingParametersSkip MissingParametersPolicy = "Skip"
)

// Integrity says how exactly a pod's injected containers must match what the
// webhook rendered for the pod's record to verify.
// +kubebuilder:validation:Enum=Tolerant;Exact
type Integrity string

const (
	// IntegrityTolerant (the default) verifies everything the webhook set,
	// and tolerates what other admission actors add without shadowing it: env
	// it did not set, mounts beside its own, a digest pin of its image,
	// hardening securityContext fields it left unset. docs/security.md
	// (Security model) lists each field.
	IntegrityTolerant Integrity = "Tolerant"
	// IntegrityExact verifies the injected containers byte for byte: any
	// other webhook's edit leaves the pod unverified, without the grants.
	IntegrityExact Integrity = "Exact"
)

// SidecarSpec defines what is injected and into which pods.
type SidecarSpec struct {
	// Containers are added to the pod. Strings may use Go templates over
	// .Parameters.<name> and .Pod (Name, GenerateName, Namespace, Labels, Annotations).
	// +optional
	// +listType=map
	// +listMapKey=name
	Containers []corev1.Container `json:"containers,omitempty"`

	// InitContainers are added before the pod's own init containers.
	// +optional
	// +listType=map
	// +listMapKey=name
	InitContainers []corev1.Container `json:"initContainers,omitempty"`

	// Volumes are added to the pod.
	// +optional
	// +listType=map
	// +listMapKey=name
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// AppVolumeMounts are added to every application container the pod already
	// had, for example to share /var/log with a log shipper.
	// +optional
	AppVolumeMounts []corev1.VolumeMount `json:"appVolumeMounts,omitempty"`

	// Resources size the Sidecar's containers per pod: requests and limits
	// from parameters (templates that render to a quantity), or a request
	// as a share of the pod's own containers' requests. A value set here
	// may not also be set in the container's own resources.
	// +optional
	// +listType=map
	// +listMapKey=container
	Resources []ContainerResources `json:"resources,omitempty"`

	// PodMetadata are labels and annotations added to each pod the Sidecar
	// is injected into. Values may use templates. A key the pod already has
	// keeps the pod's value, with a warning, unless Overwrite lists it.
	// +optional
	PodMetadata *PodMetadata `json:"podMetadata,omitempty"`

	// NativeSidecar puts Containers into initContainers with restartPolicy
	// Always (Kubernetes native sidecars) instead of appending them to containers.
	// +optional
	NativeSidecar bool `json:"nativeSidecar,omitempty"`

	// Selector selects pods by label. Unset selects no pod by label; an empty
	// selector selects every pod.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// NamespaceSelector restricts injection to namespaces whose labels match.
	// Unset or empty matches every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// Mandatory makes the Sidecar a guarantee: a pod created where its
	// selector and namespaceSelector select it is denied unless it has the
	// Sidecar's containers, whatever kept them out (a skip annotation, a
	// container of the same name, the mutating webhook down or excluded).
	// The apiserver enforces it through the ValidatingAdmissionPolicy
	// sidecar-operator-mandatory, with every operator replica down too; pods
	// that exist are reported, not evicted. It needs a selector, and no
	// activation (a pod would opt out by leaving the annotation off), and its
	// author must be allowed to create ValidatingAdmissionPolicyBindings,
	// which is the power it gives.
	// +optional
	Mandatory bool `json:"mandatory,omitempty"`

	// Activation opts a pod in through an existing annotation convention.
	// +optional
	Activation *Activation `json:"activation,omitempty"`

	// Parameters are read from pod annotations and are available to templates.
	// +optional
	// +listType=map
	// +listMapKey=name
	Parameters []Parameter `json:"parameters,omitempty"`

	// OnMissingParameters says what happens to a pod without a required parameter.
	// +optional
	// +kubebuilder:default=Reject
	OnMissingParameters MissingParametersPolicy `json:"onMissingParameters,omitempty"`

	// RBAC is what the ServiceAccount of each injected pod needs for the
	// sidecar to work. The operator grants it and takes it back when the
	// last injected pod of that ServiceAccount goes.
	// +optional
	RBAC *SidecarRBAC `json:"rbac,omitempty"`

	// AllowRequestByName lets a pod opt in with the annotation
	// sidecar-operator.io/inject: <name>, bypassing selector and activation.
	// Unset, it is allowed only for a Sidecar that grants nothing (no rbac,
	// no imagePullSecret): a request by name must not let any pod creator
	// obtain the Sidecar's grants.
	// +optional
	AllowRequestByName *bool `json:"allowRequestByName,omitempty"`

	// ImagePullSecret is a Secret the sidecar's images need. The operator
	// copies it, under the same name, into every namespace where the Sidecar
	// is injected and keeps the copy in sync; the webhook adds it to the pod's
	// imagePullSecrets.
	// +optional
	ImagePullSecret *SecretReference `json:"imagePullSecret,omitempty"`

	// Integrity says what other admission actors (webhooks, policies) may add
	// to the injected containers after injection with the record still
	// verifying: Tolerant (the default) or Exact.
	// +optional
	// +kubebuilder:default=Tolerant
	Integrity Integrity `json:"integrity,omitempty"`

	// UpdateStrategy says how a new revision of this spec reaches pods.
	// Unset is OnDelete: new pods get the newest revision at once.
	// +optional
	UpdateStrategy *SidecarUpdateStrategy `json:"updateStrategy,omitempty"`

	// RevisionHistoryLimit is how many revisions of the spec are kept as
	// ControllerRevisions in the operator's namespace; a revision a pod still
	// carries, or the Sidecar serves, is kept beyond it.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
}

// UpdateStrategyType is how a Sidecar's new revision reaches pods.
// +kubebuilder:validation:Enum=OnDelete;RollingUpdate
type UpdateStrategyType string

const (
	// OnDeleteUpdate gives new pods the newest revision at once; running
	// pods change only when their owner restarts them.
	OnDeleteUpdate UpdateStrategyType = "OnDelete"
	// RollingUpdate holds the workloads of Partition at CurrentRevision
	// and moves currentRevision to the newest once no workload is held and
	// every pod carries it.
	RollingUpdate UpdateStrategyType = "RollingUpdate"
)

// SidecarUpdateStrategy says how a new revision reaches pods.
type SidecarUpdateStrategy struct {
	// Type is OnDelete (the default) or RollingUpdate.
	// +optional
	// +kubebuilder:default=OnDelete
	Type UpdateStrategyType `json:"type,omitempty"`
	// MaxUnavailable is how many of the selected pods the operator changes
	// at once: an int, or a percent of them (at most 100%). Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="an int >= 0 or 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// Partition is how many of the selected workloads stay at
	// status.currentRevision, new pods included: an int, or a percent of
	// them (at most 100%). Workloads are ranked by a stable hash of namespace, kind and
	// name; the lowest are held. A canary is 90%, promotion 0. Default 0.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="an int >= 0 or 0% to 100%"
	Partition *intstr.IntOrString `json:"partition,omitempty"`
	// Paused stops every action of the rollout.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// ProgressDeadlineSeconds is how long an upgraded pod's sidecar
	// containers have to become Ready; past it the pod is reported, and
	// keeps its slot of maxUnavailable while the other pods move within the
	// rest. Default 300.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// Rolling reports whether the Sidecar's strategy is RollingUpdate.
func (s *SidecarSpec) Rolling() bool {
	return s.UpdateStrategy != nil && s.UpdateStrategy.Type == RollingUpdate
}

// Exact reports whether the Sidecar's records must match byte for byte.
func (s *SidecarSpec) Exact() bool { return s.Integrity == IntegrityExact }

// Grants reports whether the Sidecar makes the operator grant anything:
// RBAC rules or a pull secret copy.
func (s *SidecarSpec) Grants() bool {
	return s.ImagePullSecret != nil || s.RBAC != nil && (len(s.RBAC.Rules) > 0 || len(s.RBAC.ClusterRules) > 0)
}

// Guarded reports whether the Sidecar's records guard something, a grant or
// the mandatory guarantee, so that the pods carrying them must be validated
// (InjectionRecord.Guarded).
func (s *SidecarSpec) Guarded() bool { return s.Grants() || s.Mandatory }

// RequestByNameAllowed applies AllowRequestByName's default.
func (s *SidecarSpec) RequestByNameAllowed() bool {
	if s.AllowRequestByName != nil {
		return *s.AllowRequestByName
	}
	return !s.Grants()
}

// ContainerResources sizes one container of a Sidecar's.
type ContainerResources struct {
	// Container is the name of one of the Sidecar's containers or init containers.
	// +kubebuilder:validation:MinLength=1
	Container string `json:"container"`
	// Requests are quantities, or templates that render to one, for
	// example "{{ .Parameters.cpu }}". A rendered value that is not a
	// quantity denies the pod, naming the annotation it came from.
	// +optional
	Requests map[corev1.ResourceName]string `json:"requests,omitempty"`
	// Limits are quantities or templates, as Requests. A limit below its
	// request denies the pod.
	// +optional
	Limits map[corev1.ResourceName]string `json:"limits,omitempty"`
	// AppShare sets a request as a share of the sum of the same resource's
	// requests of the pod's own containers (spec.containers as the webhook
	// receives them), clamped to min and max.
	// +optional
	AppShare map[corev1.ResourceName]AppShare `json:"appShare,omitempty"`
}

// AppShare is a request computed from the app's: percentOfApp percent of
// the sum of the pod's containers' requests, then at least Min and at most
// Max. When the app requests none, the request is Min, or unset.
type AppShare struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	PercentOfApp int32 `json:"percentOfApp"`
	// +optional
	Min *resource.Quantity `json:"min,omitempty"`
	// +optional
	Max *resource.Quantity `json:"max,omitempty"`
}

// PodMetadata are labels and annotations a Sidecar adds to its pods.
type PodMetadata struct {
	// Labels are added to the pod; values may use templates and must
	// render to valid label values.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are added to the pod; values may use templates.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Overwrite lists the label and annotation keys whose value the Sidecar
	// sets even when the pod has one.
	// +optional
	// +listType=set
	Overwrite []string `json:"overwrite,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// SidecarRBAC holds the rules granted to the ServiceAccounts of injected pods.
type SidecarRBAC struct {
	// Rules are granted only in the namespace of each injected pod: a
	// ClusterRole "sidecar-operator:<sidecar>" bound by a RoleBinding of the
	// same name in each namespace that has an injected pod.
	// +optional
	Rules []rbacv1.PolicyRule `json:"rules,omitempty"`
	// ClusterRules are the explicit opt-in for cluster-wide grants: a
	// ClusterRole and a ClusterRoleBinding "sidecar-operator:<sidecar>:cluster"
	// whose subjects are the same ServiceAccounts across namespaces.
	// +optional
	ClusterRules []rbacv1.PolicyRule `json:"clusterRules,omitempty"`
}

// SidecarStatus is what the operator observes of a Sidecar across the cluster.
// Two controllers apply it, each under its own field manager (RBACReady, and
// the rest), so no field is required: either may write first.
type SidecarStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// UpdateRevision is the hash of the newest spec, which new injections
	// record unless the rollout holds their workload.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`
	// CurrentRevision is the revision a pod gets unless the rollout says
	// otherwise: with OnDelete the newest at once; with RollingUpdate it
	// moves to UpdateRevision once Partition is 0 and every injected pod
	// carries it. The webhook serves these two revisions and no other.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`
	// Revisions count the injected pods at each revision they carry.
	// +optional
	// +listType=map
	// +listMapKey=revision
	Revisions []RevisionPods `json:"revisions,omitempty"`
	// RetiredRevisions are the last 64 revisions the Sidecar stopped
	// serving, each with when: a pod at one gets the Sidecar's grants only
	// if it was created before then (and a short grace for the webhook
	// replicas to catch up), so a copy of an outdated pod's record made
	// later grants nothing.
	// +optional
	// +listType=map
	// +listMapKey=revision
	RetiredRevisions []RetiredRevision `json:"retiredRevisions,omitempty"`
	// RetiredRevisionsSince is when the operator began keeping
	// RetiredRevisions for this Sidecar: a revision neither served nor
	// listed stopped being served before then, so a pod at it gets grants
	// only if it was created before then (pods of an older release's time).
	// +optional
	RetiredRevisionsSince *metav1.Time `json:"retiredRevisionsSince,omitempty"`
	// HeldWorkloads is how many of the selected workloads the partition
	// holds at CurrentRevision.
	// +optional
	HeldWorkloads int32 `json:"heldWorkloads,omitempty"`
	// PartitionHash is the rank of the last workload the partition holds:
	// workloads whose rank is at most it get CurrentRevision. Empty holds
	// none.
	// +optional
	PartitionHash string `json:"partitionHash,omitempty"`
	// MatchedPods should have the sidecar: they have it, or would get it now.
	// +optional
	MatchedPods int32 `json:"matchedPods"`
	// InjectedPods have the sidecar.
	// +optional
	InjectedPods int32 `json:"injectedPods"`
	// OutdatedPods have the sidecar at an older revision than Revision.
	// +optional
	OutdatedPods int32 `json:"outdatedPods"`
	// MissedPods match but were not injected, for example because they were
	// created while the webhook was down, or before the Sidecar existed.
	// Restarting their owner injects them.
	// +optional
	MissedPods int32 `json:"missedPods"`
	// UnverifiedPods carry an injection record for this Sidecar that the
	// operator cannot verify its webhook made for that pod (forged, copied,
	// or whose injected containers changed since). They get no grant.
	// +optional
	UnverifiedPods int32 `json:"unverifiedPods"`
	// Namespaces counts the namespaces with at least one injected pod.
	// +optional
	Namespaces int32 `json:"namespaces"`
	// Conditions: Ready (the Sidecar compiles and is served), RBACReady
	// (its RBAC objects are in place) and, for a RollingUpdate,
	// RolloutProgressing (False when paused, or while a pod is past the
	// progress deadline).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RevisionPods counts the injected pods at one revision.
type RevisionPods struct {
	Revision string `json:"revision"`
	Pods     int32  `json:"pods"`
}

// RetiredRevision is a revision the Sidecar stopped serving, and when.
type RetiredRevision struct {
	Revision  string      `json:"revision"`
	RetiredAt metav1.Time `json:"retiredAt"`
}

// Condition types and reasons of a Sidecar.
const (
	ConditionReady     = "Ready"
	ConditionRBACReady = "RBACReady"
	// ConditionRolloutProgressing is False while a RollingUpdate is paused,
	// or a pod it upgraded did not become ready within progressDeadlineSeconds.
	ConditionRolloutProgressing = "RolloutProgressing"
)

// Activation opts a pod in when an annotation of its parses as true.
type Activation struct {
	// Annotation is the pod annotation key, for example "xxl-agent/enable".
	// Its value is read with Go's strconv.ParseBool.
	// +kubebuilder:validation:MinLength=1
	Annotation string `json:"annotation"`
}

// Parameter is one value read from a pod annotation.
type Parameter struct {
	// Name is how templates refer to it: {{ .Parameters.<name> }}.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// Annotation is the pod annotation key the value is read from.
	// +kubebuilder:validation:MinLength=1
	Annotation string `json:"annotation"`
	// Required parameters without a default trigger OnMissingParameters when absent.
	// +optional
	Required bool `json:"required,omitempty"`
	// NamespaceAnnotation is an annotation of the pod's namespace that gives
	// the value when the pod lacks Annotation: the pod's annotation wins,
	// then the namespace's, then Default. The webhook copies a value it took
	// from the namespace onto the pod, under Annotation, so that the pod
	// says what it was injected with.
	// +optional
	NamespaceAnnotation string `json:"namespaceAnnotation,omitempty"`
	// Default is used when the annotation is absent.
	// +optional
	Default *string `json:"default,omitempty"`
}

// Sidecar is a sidecar definition: what to inject, into which pods.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Matched",type=integer,JSONPath=`.status.matchedPods`
// +kubebuilder:printcolumn:name="Injected",type=integer,JSONPath=`.status.injectedPods`
// +kubebuilder:printcolumn:name="Outdated",type=integer,JSONPath=`.status.outdatedPods`
// +kubebuilder:printcolumn:name="Missed",type=integer,JSONPath=`.status.missedPods`
// +kubebuilder:printcolumn:name="Unverified",type=integer,JSONPath=`.status.unverifiedPods`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentRevision`
// +kubebuilder:printcolumn:name="Update",type=string,JSONPath=`.status.updateRevision`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Native",type=boolean,JSONPath=`.spec.nativeSidecar`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Sidecar struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SidecarSpec `json:"spec,omitempty"`
	// +optional
	Status SidecarStatus `json:"status,omitempty"`
}

// SidecarList is a list of Sidecars.
// +kubebuilder:object:root=true
type SidecarList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sidecar `json:"items"`
}

// InjectionStatus is the JSON stored in the AnnotationStatus pod annotation.
type InjectionStatus struct {
	Sidecars []InjectionRecord `json:"sidecars"`
}

// InjectionRecord names one injected Sidecar and the spec revision injected,
// with the webhook's proof that it made this injection for this pod.
type InjectionRecord struct {
	Name string `json:"name"`
	// Guarded says whether the Sidecar, when it was injected, made grants
	// (rbac, imagePullSecret) or was mandatory: the apiserver sends
	// /validate-pods only pods with a guarded record, or with a record
	// written before this field (absent), and a record keeps a mandatory
	// Sidecar only on such a pod (RecordGuarded). Not signed, so that the
	// replicas of a release before it verify the records of this one.
	Guarded  *bool  `json:"guarded,omitempty"`
	Revision string `json:"revision"`
	// Containers are the names of the containers the injection added.
	Containers []string `json:"containers,omitempty"`
	// Digest is a hash of what was injected into those containers: image,
	// command, args, workingDir, env, envFrom, securityContext, volumeMounts,
	// volumeDevices, probes and lifecycle.
	Digest string `json:"digest,omitempty"`
	// VolumeDigest is a hash of the pod's volumes that those containers
	// mount, as they were at injection.
	VolumeDigest string `json:"volumeDigest,omitempty"`
	// Owned says, per injected container, what the webhook set and so what
	// verification holds to it when other admission actors add to the
	// container (integrity Tolerant): "<env count>.<volumeMount count>.<the
	// securityContext fields set, as bits>.<a short hash of each covered
	// field>", comma-separated. Records of integrity Exact have none.
	Owned string `json:"owned,omitempty"`
	// Signature is "<key id>.<HMAC-SHA256>" over the pod's namespace and
	// ServiceAccount, the name, revision, containers, owned and both digests.
	Signature string `json:"signature,omitempty"`
}
