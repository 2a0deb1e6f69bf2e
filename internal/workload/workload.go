// Package workload owns what workload a pod belongs to, read from the pod
// alone, and the stable rank by which a rollout's partition holds
// workloads: the webhook, which sees one pod, and the controllers, which
// see them all, must agree on both.
package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Ref names a workload: a pod's top-level owner, or the pod itself.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (r Ref) String() string { return r.Kind + " " + r.Namespace + "/" + r.Name }

// Of returns the workload of a pod from its namespace, name, labels and
// controlling owner (empty ownerKind for none), with no lookup: a
// ReplicaSet named after its pods' pod-template-hash is a Deployment's, and
// the Deployment's name is the ReplicaSet's without that suffix.
func Of(namespace, podName string, labels map[string]string, ownerKind, ownerName string) Ref {
	switch ownerKind {
	case "":
		return Ref{Kind: "Pod", Namespace: namespace, Name: podName}
	case "ReplicaSet":
		if hash := labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			if name, ok := strings.CutSuffix(ownerName, "-"+hash); ok && name != "" {
				return Ref{Kind: "Deployment", Namespace: namespace, Name: name}
			}
		}
	}
	return Ref{Kind: ownerKind, Namespace: namespace, Name: ownerName}
}

// OfPod returns the workload of a typed pod.
func OfPod(pod *corev1.Pod) Ref {
	kind, name := "", ""
	if owner := metav1.GetControllerOf(pod); owner != nil {
		kind, name = owner.Kind, owner.Name
	}
	return Of(pod.Namespace, pod.Name, pod.Labels, kind, name)
}

// Rank is the workload's place in a partition: 16 hex digits of a SHA-256
// of namespace, kind and name, the same on every replica and release.
func Rank(r Ref) string {
	sum := sha256.Sum256([]byte(r.Namespace + "/" + r.Kind + "/" + r.Name))
	return hex.EncodeToString(sum[:8])
}

// Held reports whether a partition up to boundary holds the workload of
// rank rank. An empty boundary holds none.
func Held(rank, boundary string) bool { return boundary != "" && rank <= boundary }

// Boundary returns the partition boundary that holds exactly held of the
// workloads ranked ranks (distinct), the lowest first, and how many that is.
func Boundary(ranks []string, held int) (string, int) {
	held = min(held, len(ranks))
	if held <= 0 {
		return "", 0
	}
	sorted := slices.Clone(ranks)
	slices.Sort(sorted)
	return sorted[held-1], held
}

// Scaled resolves an int or percent of total, rounding a percent down
// (partition: "50%" of 5 holds 2) or up (maxUnavailable: "10%" of 5 is 1).
// nil is def.
func Scaled(v *intstr.IntOrString, total int, roundUp bool, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	return intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
}
