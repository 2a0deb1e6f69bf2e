package validation

import corev1 "k8s.io/api/core/v1"

type containerMounts []string

func mounts(cs []corev1.Container) []containerMounts {
	out := make([]containerMounts, len(cs))
	for i, c := range cs {
		for _, m := range c.VolumeMounts {
			out[i] = append(out[i], m.Name)
		}
	}
	return out
}
