// Package validation judges Sidecars and injected pods for the validating
// webhooks: every problem is reported at once, each naming its field.
package validation

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// Sidecar returns every reason sc cannot be injected safely. Other Sidecars
// are not among them: a container name they add too is no reason, or whoever
// claims a name first would block everyone else's Sidecars of it; the
// injection engine denies a pod that two Sidecars add one name to.
func Sidecar(sc *v1alpha1.Sidecar) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if err := inject.TooManyContainers(&sc.Spec); err != nil {
		return field.ErrorList{field.Forbidden(spec.Child("containers"), err.Error())}
	}

	// Templates, parameters, selectors: whatever the engine refuses to
	// compile. Its messages name their fields already.
	if _, err := inject.New([]v1alpha1.Sidecar{*sc}); err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			line = strings.TrimPrefix(line, fmt.Sprintf("sidecar %q: ", sc.Name))
			// A message that starts with its field keeps it as the path.
			at, detail, ok := strings.Cut(line, ": ")
			if !ok || !strings.HasPrefix(at, "spec.") || strings.ContainsAny(at, " \"") {
				at, detail = "spec", line
			}
			errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: at, BadValue: field.OmitValueType{}, Detail: detail})
		}
	}

	// Names once each, and only pull policies a pod may have: the apiserver
	// refuses every pod with another.
	pullPolicies := []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	containers := map[string]*field.Path{}
	var pulls field.ErrorList
	for _, group := range []struct {
		path *field.Path
		list []corev1.Container
	}{{spec.Child("initContainers"), sc.Spec.InitContainers}, {spec.Child("containers"), sc.Spec.Containers}} {
		for i, c := range group.list {
			if c.ImagePullPolicy != "" && !slices.Contains(pullPolicies, c.ImagePullPolicy) {
				pulls = append(pulls, field.NotSupported(group.path.Index(i).Child("imagePullPolicy"), c.ImagePullPolicy, pullPolicies))
			}
			p := group.path.Index(i).Child("name")
			if first, dup := containers[c.Name]; dup {
				errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (also %s)", c.Name, first)))
				continue
			}
			containers[c.Name] = p
		}
	}
	errs = append(errs, pulls...)
	volumes := map[string]bool{}
	for i, v := range sc.Spec.Volumes {
		if volumes[v.Name] {
			errs = append(errs, field.Duplicate(spec.Child("volumes").Index(i).Child("name"), v.Name))
		}
		volumes[v.Name] = true
		if strings.HasPrefix(v.Name, signing.TokenVolumePrefix) {
			errs = append(errs, field.Forbidden(spec.Child("volumes").Index(i).Child("name"), fmt.Sprintf(
				"%s* is the ServiceAccount admission plugin's name for the pod's token volume", signing.TokenVolumePrefix)))
		}
	}
	errs = append(errs, tokenPathMounts(&sc.Spec, spec)...)
	for _, group := range []struct {
		path *field.Path
		list []containerMounts
	}{
		{spec.Child("initContainers"), mounts(sc.Spec.InitContainers)},
		{spec.Child("containers"), mounts(sc.Spec.Containers)},
	} {
		for i, c := range group.list {
			for j, m := range c {
				if !volumes[m] {
					errs = append(errs, field.Invalid(group.path.Index(i).Child("volumeMounts").Index(j).Child("name"), m,
						"not in spec.volumes; a sidecar mounts only volumes it defines"))
				}
			}
		}
	}

	if rbac := sc.Spec.RBAC; rbac != nil {
		for _, group := range []struct {
			path  *field.Path
			rules int
			verbs func(int) []string
		}{
			{spec.Child("rbac", "rules"), len(rbac.Rules), func(i int) []string { return rbac.Rules[i].Verbs }},
			{spec.Child("rbac", "clusterRules"), len(rbac.ClusterRules), func(i int) []string { return rbac.ClusterRules[i].Verbs }},
		} {
			for i := range group.rules {
				if len(group.verbs(i)) == 0 {
					errs = append(errs, field.Required(group.path.Index(i).Child("verbs"), "a rule grants nothing without verbs"))
				}
			}
		}
	}

	// Cluster-wide grants to whoever gets injected need the namespaces scoped,
	// by labels an administrator controls.
	if rbac := sc.Spec.RBAC; rbac != nil && len(rbac.ClusterRules) > 0 {
		if ns := sc.Spec.NamespaceSelector; ns == nil || len(ns.MatchLabels) == 0 && len(ns.MatchExpressions) == 0 {
			errs = append(errs, field.Required(spec.Child("namespaceSelector"),
				"a Sidecar with rbac.clusterRules must select namespaces by labels that only administrators set (kubernetes.io/metadata.name, say)"))
		}
	}

	return errs
}

// tokenPathMounts refuses mounts at or under the ServiceAccount token's
// directory: the plugin mounts the pod's own token there, into the injected
// containers too, and the digest of an injection leaves that one mount out.
func tokenPathMounts(s *v1alpha1.SidecarSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, mountPath string) {
		if signing.AtTokenPath(mountPath) {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("%s is where the pod's ServiceAccount token is mounted", signing.TokenMountPath)))
		}
	}
	for _, group := range []struct {
		path *field.Path
		list []corev1.Container
	}{{spec.Child("initContainers"), s.InitContainers}, {spec.Child("containers"), s.Containers}} {
		for i, c := range group.list {
			for j, m := range c.VolumeMounts {
				check(group.path.Index(i).Child("volumeMounts").Index(j).Child("mountPath"), m.MountPath)
			}
		}
	}
	for i, m := range s.AppVolumeMounts {
		check(spec.Child("appVolumeMounts").Index(i).Child("mountPath"), m.MountPath)
	}
	return errs
}

// SidecarName refuses a name too long for the pin annotation
// sidecar-operator.io/revision.<name>, whose name part is at most 63
// characters.
func SidecarName(name string) field.ErrorList {
	if len(name) <= v1alpha1.MaxSidecarName {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf(
		"at most %d characters, so that the pod annotation %s<name>, which pins a revision, fits", v1alpha1.MaxSidecarName, v1alpha1.AnnotationRevisionPrefix))}
}

// Message is a denial listing every error.
func Message(kind, name string, errs field.ErrorList) string {
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return fmt.Sprintf("%s %q has %d problem(s): %s", kind, name, len(errs), strings.Join(lines, "; "))
}
