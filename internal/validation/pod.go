package validation

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

// LabelValidation on a namespace set to "disabled" turns pod validation off there.
const LabelValidation = "sidecar-operator.io/validation"

var statusPath = field.NewPath("metadata", "annotations").Key(v1alpha1.AnnotationStatus)

// Pod returns why a pod's injection record cannot be trusted: it claims
// sidecars whose containers the pod lacks (a forged marker), or, on UPDATE
// (old is not nil), it removes or alters the record the pod was created with.
func Pod(pod, old *corev1.Pod, engine *inject.Engine) field.ErrorList {
	var errs field.ErrorList
	records, err := parseRecords(pod)
	if err != nil {
		return field.ErrorList{field.Invalid(statusPath, pod.Annotations[v1alpha1.AnnotationStatus], err.Error())}
	}
	if old != nil {
		oldRecords, err := parseRecords(old)
		if err == nil && !slices.Equal(oldRecords, records) {
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("the injection record %v cannot be removed or changed (now %v)", oldRecords, records)))
		}
	}
	have := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		have[c.Name] = true
	}
	for _, c := range pod.Spec.Containers {
		have[c.Name] = true
	}
	for _, r := range records {
		containers, known := engine.ContainerNames(r.Name)
		if !known {
			continue // a Sidecar since deleted: nothing to check against
		}
		for _, name := range containers {
			if !have[name] {
				errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("claims sidecar %q, but the pod has no container %q: a forged injection record", r.Name, name)))
			}
		}
	}
	return errs
}

func parseRecords(pod *corev1.Pod) ([]v1alpha1.InjectionRecord, error) {
	raw, ok := pod.Annotations[v1alpha1.AnnotationStatus]
	if !ok {
		return nil, nil
	}
	var status v1alpha1.InjectionStatus
	if err := json.Unmarshal([]byte(raw), &status); err != nil {
		return nil, fmt.Errorf("not valid injection status JSON: %v", err)
	}
	return status.Sidecars, nil
}
