package admissionchain

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// Change is one difference between an injected container as our webhook
// rendered it and as the apiserver stored it.
type Change struct {
	Container string `json:"container"`
	// What is the difference, for example "env TZ added".
	What string `json:"what"`
	// By names the steps that could have made it; empty when none listed could.
	By []string `json:"by,omitempty"`
}

// String is the change as printed.
func (c Change) String() string {
	by := "by none of the listed webhooks and policies: an in-tree admission plugin, reinvoked after the webhooks"
	if len(c.By) > 0 {
		by = "by one of: " + strings.Join(c.By, ", ")
	}
	return fmt.Sprintf("container %s: %s (%s)", c.Container, c.What, by)
}

// Changes compares the containers named of rendered, the pod our webhook
// rendered, with those of stored, the pod the apiserver returned, and
// attributes each difference to the chain's steps that could have made it.
// The ServiceAccount token mount is left out: the ServiceAccount plugin adds
// it to every container.
func (c Chain) Changes(rendered, stored *corev1.Pod, containers []string) []Change {
	actors := c.ActorsAfterOurs()
	var out []Change
	for _, name := range containers {
		want, have := container(rendered, name), container(stored, name)
		if want == nil {
			continue
		}
		if have == nil {
			out = append(out, Change{Container: name, What: "removed", By: actors})
			continue
		}
		for _, what := range containerDiff(withAPIDefaults(*want), *have) {
			out = append(out, Change{Container: name, What: what, By: actors})
		}
	}
	return out
}

func container(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		if i := slices.IndexFunc(list, func(c corev1.Container) bool { return c.Name == name }); i >= 0 {
			return &list[i]
		}
	}
	return nil
}

// containerDiff says, field by field, how have differs from want: image,
// env by name, volumeMounts by mountPath, securityContext by field, resource
// requests and limits by resource, and any other field as a whole.
func containerDiff(want, have corev1.Container) []string {
	var out []string
	if want.Image != have.Image {
		out = append(out, fmt.Sprintf("image changed from %s to %s", want.Image, have.Image))
	}
	envKey := func(e corev1.EnvVar) string { return e.Name }
	out = append(out, keyedDiff("env", want.Env, have.Env, envKey)...)
	mountKey := func(m corev1.VolumeMount) string { return m.MountPath }
	out = append(out, keyedDiff("volumeMount", want.VolumeMounts, withoutTokenMount(have.VolumeMounts), mountKey)...)
	out = append(out, fieldDiff("securityContext.", want.SecurityContext, have.SecurityContext)...)
	out = append(out, fieldDiff("resources.requests.", want.Resources.Requests, have.Resources.Requests)...)
	out = append(out, fieldDiff("resources.limits.", want.Resources.Limits, have.Resources.Limits)...)
	want.Image, want.Env, want.VolumeMounts, want.SecurityContext = "", nil, nil, nil
	have.Image, have.Env, have.VolumeMounts, have.SecurityContext = "", nil, nil, nil
	want.Resources.Requests, want.Resources.Limits, have.Resources.Requests, have.Resources.Limits = nil, nil, nil, nil
	return append(out, fieldDiff("", want, have)...)
}

// keyedDiff compares two lists by key: added, changed, removed.
func keyedDiff[T any](field string, want, have []T, key func(T) string) []string {
	wantByKey := map[string]T{}
	for _, w := range want {
		wantByKey[key(w)] = w
	}
	var out []string
	seen := map[string]bool{}
	for _, h := range have {
		k := key(h)
		seen[k] = true
		w, ok := wantByKey[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s added", field, k))
		case !equality.Semantic.DeepEqual(w, h):
			out = append(out, fmt.Sprintf("%s %s changed", field, k))
		}
	}
	for _, w := range want {
		if !seen[key(w)] {
			out = append(out, fmt.Sprintf("%s %s removed", field, key(w)))
		}
	}
	return out
}

func withoutTokenMount(mounts []corev1.VolumeMount) []corev1.VolumeMount {
	return slices.DeleteFunc(slices.Clone(mounts), func(m corev1.VolumeMount) bool {
		return m.MountPath == signing.TokenMountPath && strings.HasPrefix(m.Name, signing.TokenVolumePrefix)
	})
}

// fieldDiff compares the JSON fields of two values: added, changed, removed.
func fieldDiff(prefix string, want, have any) []string {
	w, h := jsonFields(want), jsonFields(have)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		wv, ok := w[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s%s added", prefix, k))
		case !reflect.DeepEqual(wv, h[k]):
			out = append(out, fmt.Sprintf("%s%s changed", prefix, k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if _, ok := h[k]; !ok {
			out = append(out, fmt.Sprintf("%s%s removed", prefix, k))
		}
	}
	return out
}

func jsonFields(v any) map[string]any {
	fields := map[string]any{}
	raw, err := json.Marshal(v)
	if err == nil {
		// A nil pointer marshals to null, which leaves fields empty.
		_ = json.Unmarshal(raw, &fields)
	}
	return fields
}

// withAPIDefaults sets on a rendered container what the apiserver's
// defaulting sets on every stored one, so that only what others changed
// differs.
func withAPIDefaults(c corev1.Container) corev1.Container {
	c = signing.StoredContainer(*c.DeepCopy())
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	// A limit without a request is the request too.
	for name, limit := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[name] = limit
		}
	}
	return c
}
