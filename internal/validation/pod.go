package validation

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

var statusPath = field.NewPath("metadata", "annotations").Key(v1alpha1.AnnotationStatus)

// Pod returns why a pod's injection record cannot be trusted, and warnings
// for records that will not verify though the webhook made them.
//
// On CREATE (old is nil) every record must parse, name a Sidecar the engine
// knows, and, when ring is set, carry the webhook's signature for this pod,
// at a revision the Sidecar serves (inject.Engine.Serves). Injected containers that changed after
// injection (another webhook's or policy's edit, or a copy's) do not refuse
// the pod: they leave it without the grants, and a warning names the
// field. Without a ring (the standalone webhook, which grants nothing) the
// claimed containers must at least exist.
//
// On UPDATE, through pods, pods/status or pods/ephemeralcontainers, the old
// record must parse, the record must stay byte for byte what it was, and the
// injected containers must keep what the digest covers; but an update by
// the operator's controllers (upgrader) may move records to another
// revision in place (inPlace).
//
// mandatory names the mandatory Sidecars that select a new pod
// (inject.Engine.Mandatory): the apiserver's policy
// (webhookconfig.MandatoryPolicy) finds each one's name in the annotation's
// text; here it must be a record, and, where ring is set, one that verifies
// in full, as a record signed for the namespace and ServiceAccount can be
// copied beside a container of the Sidecar's name that runs something else.
func Pod(pod, old *corev1.Pod, engine *inject.Engine, ring *signing.Ring, upgrader bool, mandatory []string) (errs field.ErrorList, warnings []string) {
	records, err := parseRecords(pod)
	if err != nil {
		return field.ErrorList{field.Invalid(statusPath, abbreviate(pod.Annotations[v1alpha1.AnnotationStatus]), err.Error())}, nil
	}
	if old != nil {
		switch {
		case upgrader && ring != nil && movesInPlace(records, old):
			return inPlace(pod, old, records, engine, ring), nil
		case upgrader && imagesChanged(pod, old):
			// The controllers change images only by moving records.
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "containers"),
				"the operator's controllers change a pod's images only to move its records in place")}, nil
		}
		return append(podUpdate(pod, old, engine), labelledUnder(pod, records, engine, ring, mandatory)...), nil
	}
	if raw, ok := pod.Annotations[v1alpha1.AnnotationStatus]; ok && !inject.WrittenAsTheWebhookWrites(raw, records) {
		// The mandatory policy finds a Sidecar's name in the text, and the
		// matchConditions its guarded field: text the records do not read
		// as (a member no record has, other spacing or capitals) would
		// mislead them once the pod's labels change, which is not sent here.
		errs = append(errs, field.Invalid(statusPath, abbreviate(raw), fmt.Sprintf(
			"not written as the webhook writes injection records (%s): the apiserver's own checks read this text", abbreviate(inject.FormatStatus(records)))))
	}
	seen := map[string]bool{}
	for i := range records {
		r := &records[i]
		if seen[r.Name] {
			errs = append(errs, field.Duplicate(statusPath, r.Name))
			continue
		}
		seen[r.Name] = true
		containers, known := engine.ContainerNames(r.Name)
		if at, served := engine.ContainerNamesAt(r.Name, r.Revision); served {
			containers = at
		}
		switch {
		case !known:
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("names sidecar %q, which does not exist", r.Name)))
		case ring != nil && r.Signature != "" && !slices.Equal(r.Containers, containers):
			// Before Verify: its lookups cost a pass over the pod's containers a name.
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("the record of sidecar %q names containers %s; the Sidecar injects %s",
				r.Name, abbreviate(strings.Join(r.Containers, ",")), strings.Join(containers, ","))))
		case ring != nil:
			err := engine.Verify(ring, pod, r)
			if signing.Forged(err) {
				errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("the record of sidecar %q was not made by the webhook for this pod: %v", r.Name, err)))
				break
			}
			switch {
			case err != nil && slices.Contains(mandatory, r.Name):
				errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf(
					"sidecar %q is mandatory for this pod, and its containers are not those the webhook injected: %v", r.Name, err)))
			case err != nil:
				warnings = append(warnings, shortened(fmt.Sprintf("sidecar %q grants nothing (rbac, pull secret) to this pod: %v", r.Name, err), maxWarning))
			}
			if !engine.Serves(r.Name, r.Revision) {
				// Only pods injected before a change may stay behind: a copy
				// of their record would run a superseded template with the grant.
				errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf(
					"the record of sidecar %q is of revision %s, and the Sidecar serves %s: a new pod gets a revision it serves; create it without the record",
					r.Name, abbreviate(r.Revision), engine.ServedText(r.Name))))
			}
		default:
			for _, name := range containers {
				if !hasContainer(pod, name) {
					msg := fmt.Sprintf("claims sidecar %q, but the pod has no container %q: a forged injection record", r.Name, name)
					errs = append(errs, field.Forbidden(statusPath, msg))
				}
			}
		}
	}
	for _, name := range mandatory {
		if !seen[name] {
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf(
				"sidecar %q is mandatory for this pod (its selector and namespaceSelector select it), and the pod carries no injection record of it: "+
					"create it without the %s annotation, without containers of its names, while the injection webhook is up", name, v1alpha1.AnnotationSkip)))
		}
	}
	return errs, warnings
}

func podUpdate(pod, old *corev1.Pod, engine *inject.Engine) field.ErrorList {
	oldRecords, err := parseRecords(old)
	if err != nil {
		return field.ErrorList{field.Forbidden(statusPath, "the pod's stored injection record does not parse, so no update can be judged: "+err.Error())}
	}
	if now, before := pod.Annotations[v1alpha1.AnnotationStatus], old.Annotations[v1alpha1.AnnotationStatus]; now != before {
		return field.ErrorList{field.Forbidden(statusPath, fmt.Sprintf("the injection record %q cannot be removed or changed (now %q)", before, now))}
	}
	var errs field.ErrorList
	injected := map[string]string{} // container name to Sidecar
	for i := range oldRecords {
		r := &oldRecords[i]
		names := r.Containers
		if len(names) == 0 { // a record from before signing names no containers
			names, _ = engine.ContainerNames(r.Name)
		}
		for _, name := range names {
			// Each container is compared once, however many names name it:
			// 236 records naming one 16 KiB container 64 times each
			// digested it 30,000 times (546 MiB).
			if _, compared := injected[name]; compared {
				continue
			}
			injected[name] = r.Name
			before, after := signing.Container(old, name), signing.Container(pod, name)
			if before == nil {
				continue
			}
			if after == nil || signing.Digest([]corev1.Container{*before}) != signing.Digest([]corev1.Container{*after}) {
				errs = append(errs, field.Forbidden(containerPath(pod, name), fmt.Sprintf(
					"container %q was injected by sidecar %q: its %s cannot be changed", name, r.Name, signing.CoveredFields)))
			}
		}
	}
	return append(errs, ephemeralTargets(pod, old, injected)...)
}

// ephemeralTargets refuses a new ephemeral container that targets an
// injected one: it would share the sidecar's process namespace, and with it
// the sidecar's files and memory.
func ephemeralTargets(pod, old *corev1.Pod, injected map[string]string) field.ErrorList {
	var errs field.ErrorList
	existed := map[string]bool{}
	for _, c := range old.Spec.EphemeralContainers {
		existed[c.Name] = true
	}
	for i, c := range pod.Spec.EphemeralContainers {
		if sidecar, ok := injected[c.TargetContainerName]; ok && !existed[c.Name] {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "ephemeralContainers").Index(i).Child("targetContainerName"),
				fmt.Sprintf("container %q was injected by sidecar %q; an ephemeral container may not share its process namespace", c.TargetContainerName, sidecar)))
		}
	}
	return errs
}

// labelledUnder judges an update whose labels bring the pod under the
// mandatory Sidecars named: each needs a record that verifies in full, as
// at creation. A record that held no guarantee when the pod was created
// (its Sidecar did not select it, or was not mandatory) was judged then
// only as one that grants, which a copy of another pod's passes without
// the containers it names.
func labelledUnder(pod *corev1.Pod, records []v1alpha1.InjectionRecord, engine *inject.Engine, ring *signing.Ring,
	mandatory []string) field.ErrorList {
	var errs field.ErrorList
	for _, name := range mandatory {
		i := slices.IndexFunc(records, func(r v1alpha1.InjectionRecord) bool { return r.Name == name })
		var err error
		switch {
		case i < 0:
			err = errors.New("the pod carries no injection record of it")
		case ring != nil:
			err = engine.Verify(ring, pod, &records[i])
		}
		if err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "labels"), fmt.Sprintf(
				"sidecar %q is mandatory for pods with these labels, and this pod's record of it does not hold: %v", name, err)))
		}
	}
	return errs
}

func parseRecords(pod *corev1.Pod) ([]v1alpha1.InjectionRecord, error) {
	raw, ok := pod.Annotations[v1alpha1.AnnotationStatus]
	if !ok {
		return nil, nil
	}
	status, err := inject.ParseStatus(raw)
	if err != nil {
		return nil, fmt.Errorf("not valid injection status JSON: %v", err)
	}
	return status.Sidecars, nil
}

func hasContainer(pod *corev1.Pod, name string) bool { return signing.Container(pod, name) != nil }

// containerPath names a container's field by its index in the pod.
func containerPath(pod *corev1.Pod, name string) *field.Path {
	for _, group := range []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i := range group.list {
			if group.list[i].Name == name {
				return field.NewPath("spec", group.field).Index(i)
			}
		}
	}
	return field.NewPath("spec", "containers").Key(name)
}

// abbreviate keeps a denial short whatever the value it quotes: the
// annotation may be as long as a pod creator likes.
func abbreviate(s string) string { return shortened(s, 256) }

// maxWarning bounds a warning: the apiserver passes it on to the client.
const maxWarning = 1024

func shortened(s string, most int) string {
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + "…"
}

// imagesChanged reports whether an update changes any container's image.
func imagesChanged(pod, old *corev1.Pod) bool {
	// By a map, not signing.Container's scan of the pod for each name: 7,500
	// containers a pod took 0.6 s.
	images := make(map[string]string, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if _, seen := images[list[i].Name]; !seen { // the first, as signing.Container finds it
				images[list[i].Name] = list[i].Image
			}
		}
	}
	for _, list := range [][]corev1.Container{old.Spec.InitContainers, old.Spec.Containers} {
		for i := range list {
			if after, ok := images[list[i].Name]; ok && after != list[i].Image {
				return true
			}
		}
	}
	return false
}

// movesInPlace reports whether records keep the stored pod's Sidecars, in
// order, and move one to another revision: what an upgrade in place
// writes. Any other change of the record is judged as anyone's.
func movesInPlace(records []v1alpha1.InjectionRecord, old *corev1.Pod) bool {
	stored, err := parseRecords(old)
	if err != nil || len(stored) != len(records) {
		return false
	}
	moved := false
	for i := range records {
		if records[i].Name != stored[i].Name {
			return false
		}
		moved = moved || records[i].Revision != stored[i].Revision
	}
	return moved
}

// inPlace judges an update by the operator's controllers that moves
// records to another revision in place (inject.Engine.Upgrade): the records
// keep their Sidecars and order; each that changed is at a revision its
// Sidecar serves, names the same containers and verifies on the updated
// pod; and the only containers whose images changed are those of the
// changed records, each to what its new record covers. Everything else the
// record covers stays, as for any update.
func inPlace(pod, old *corev1.Pod, records []v1alpha1.InjectionRecord, engine *inject.Engine, ring *signing.Ring) field.ErrorList {
	oldRecords, err := parseRecords(old)
	if err != nil {
		return field.ErrorList{field.Forbidden(statusPath, "the pod's stored injection record does not parse, so no update can be judged: "+err.Error())}
	}
	if len(records) != len(oldRecords) {
		return field.ErrorList{field.Forbidden(statusPath, "an upgrade in place keeps the pod's Sidecars: records cannot be added or removed")}
	}
	var errs field.ErrorList
	moved := map[string]bool{} // containers whose image may change
	for i := range records {
		r, was := &records[i], &oldRecords[i]
		if equality.Semantic.DeepEqual(r, was) {
			continue
		}
		switch {
		case r.Name != was.Name || !slices.Equal(r.Containers, was.Containers):
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf(
				"the record of sidecar %q may change revision in place, not its Sidecar or containers", was.Name)))
		case engine.Verify(ring, old, was) != nil:
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf(
				"the record of sidecar %q does not verify on the stored pod: an upgrade in place does not sign it anew", was.Name)))
		case !engine.Serves(r.Name, r.Revision):
			errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("the record of sidecar %q moves to revision %s, which the Sidecar does not serve (%s)",
				r.Name, abbreviate(r.Revision), engine.ServedText(r.Name))))
		default:
			if err := engine.Verify(ring, pod, r); err != nil {
				errs = append(errs, field.Forbidden(statusPath, fmt.Sprintf("the record of sidecar %q at revision %s does not verify on the updated pod: %v",
					r.Name, abbreviate(r.Revision), err)))
			}
			// Images from the revision as the engine renders it for this
			// pod, not from whoever holds the signing key.
			want, err := engine.Upgrade(old, r.Name, r.Revision, ring)
			for _, name := range r.Containers {
				moved[name] = true
				if err != nil || signing.Container(want, name).Image != signing.Container(pod, name).Image {
					errs = append(errs, field.Forbidden(containerPath(pod, name).Child("image"), fmt.Sprintf(
						"revision %s of sidecar %q does not give container %q this image in place", abbreviate(r.Revision), r.Name, name)))
				}
			}
		}
	}
	for _, list := range [][2][]corev1.Container{{old.Spec.InitContainers, pod.Spec.InitContainers}, {old.Spec.Containers, pod.Spec.Containers}} {
		for _, before := range list[0] {
			after := signing.Container(pod, before.Name)
			if after != nil && after.Image != before.Image && !moved[before.Name] {
				errs = append(errs, field.Forbidden(containerPath(pod, before.Name).Child("image"), fmt.Sprintf(
					"container %q is not one a record moving in place covers: its image cannot change in an upgrade", before.Name)))
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// What the records cover besides the images, and ephemeral targets, as for any update.
	unmoved := old.DeepCopy()
	unmoved.Annotations[v1alpha1.AnnotationStatus] = pod.Annotations[v1alpha1.AnnotationStatus]
	for name := range moved {
		signing.Container(unmoved, name).Image = signing.Container(pod, name).Image
	}
	return podUpdate(pod, unmoved, engine)
}
