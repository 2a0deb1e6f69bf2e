package signing

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The webhook hashes containers and volumes as it renders them; the
// apiserver then applies its defaults and stores them. These functions apply
// those defaults, for the fields the digests cover, so that both hash alike:
// they copy what they change and are idempotent. TestDefaultsMatchTheApiserver
// (test/integration) holds them to a real apiserver's, field by field.

// StoredContainer returns c with the apiserver's defaults for the fields
// the digest covers, sharing what it does not change.
func StoredContainer(c corev1.Container) corev1.Container {
	ct := storedContent(contentOf(&c))
	c.Env, c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = ct.Env, ct.LivenessProbe, ct.ReadinessProbe, ct.StartupProbe, ct.Lifecycle
	c.TerminationMessagePath, c.ImagePullPolicy = ct.TerminationMessagePath, orPullPolicy(c.ImagePullPolicy, c.Image)
	return c
}

// storedContent returns c with the apiserver's defaults.
func storedContent(c Content) Content {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	c.Env = storedEnv(c.Env)
	c.LivenessProbe = storedProbe(c.LivenessProbe)
	c.ReadinessProbe = storedProbe(c.ReadinessProbe)
	c.StartupProbe = storedProbe(c.StartupProbe)
	if l := c.Lifecycle; l != nil && (needsHandlerDefaults(l.PostStart) || needsHandlerDefaults(l.PreStop)) {
		l = l.DeepCopy()
		defaultHandler(l.PostStart)
		defaultHandler(l.PreStop)
		c.Lifecycle = l
	}
	return c
}

// storedEnv: a fieldRef's apiVersion is "v1" when unset; a fileKeyRef is
// not optional when unset.
func storedEnv(env []corev1.EnvVar) []corev1.EnvVar {
	if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return envNeedsDefaults(e.ValueFrom) }) {
		return env
	}
	out := slices.Clone(env)
	for j := range out {
		if vf := out[j].ValueFrom; envNeedsDefaults(vf) {
			from := vf.DeepCopy()
			if from.FieldRef != nil && from.FieldRef.APIVersion == "" {
				from.FieldRef.APIVersion = "v1"
			}
			if from.FileKeyRef != nil && from.FileKeyRef.Optional == nil {
				from.FileKeyRef.Optional = new(false)
			}
			out[j].ValueFrom = from
		}
	}
	return out
}

func envNeedsDefaults(vf *corev1.EnvVarSource) bool {
	return vf != nil && (vf.FieldRef != nil && vf.FieldRef.APIVersion == "" || vf.FileKeyRef != nil && vf.FileKeyRef.Optional == nil)
}

func storedProbe(p *corev1.Probe) *corev1.Probe {
	if p == nil {
		return nil
	}
	p = p.DeepCopy()
	for _, d := range []struct {
		field *int32
		value int32
	}{{&p.TimeoutSeconds, 1}, {&p.PeriodSeconds, 10}, {&p.SuccessThreshold, 1}, {&p.FailureThreshold, 3}} {
		if *d.field == 0 {
			*d.field = d.value
		}
	}
	defaultHTTPGet(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = new("")
	}
	return p
}

func needsHandlerDefaults(h *corev1.LifecycleHandler) bool {
	return h != nil && h.HTTPGet != nil && (h.HTTPGet.Path == "" || h.HTTPGet.Scheme == "")
}

func defaultHandler(h *corev1.LifecycleHandler) {
	if h != nil {
		defaultHTTPGet(h.HTTPGet)
	}
}

func defaultHTTPGet(g *corev1.HTTPGetAction) {
	if g == nil {
		return
	}
	if g.Path == "" {
		g.Path = "/"
	}
	if g.Scheme == "" {
		g.Scheme = corev1.URISchemeHTTP
	}
}

// storedVolume returns a copy of v with the apiserver's defaults.
func storedVolume(v *corev1.Volume) *corev1.Volume {
	v = v.DeepCopy()
	s := &v.VolumeSource
	if ptr.AllPtrFieldsNil(s) {
		s.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	mode := ptr.To[int32](0o644)
	switch {
	case s.Secret != nil:
		s.Secret.DefaultMode = orDefault(s.Secret.DefaultMode, mode)
	case s.ConfigMap != nil:
		s.ConfigMap.DefaultMode = orDefault(s.ConfigMap.DefaultMode, mode)
	case s.DownwardAPI != nil:
		s.DownwardAPI.DefaultMode = orDefault(s.DownwardAPI.DefaultMode, mode)
		defaultFieldRefs(s.DownwardAPI.Items)
	case s.Projected != nil:
		s.Projected.DefaultMode = orDefault(s.Projected.DefaultMode, mode)
		for i := range s.Projected.Sources {
			p := &s.Projected.Sources[i]
			if p.DownwardAPI != nil {
				defaultFieldRefs(p.DownwardAPI.Items)
			}
			if p.ServiceAccountToken != nil {
				p.ServiceAccountToken.ExpirationSeconds = orDefault(p.ServiceAccountToken.ExpirationSeconds, ptr.To[int64](3600))
			}
		}
	case s.HostPath != nil:
		s.HostPath.Type = orDefault(s.HostPath.Type, ptr.To(corev1.HostPathUnset))
	case s.Image != nil:
		// Always stays Always: with another policy a cached build could run.
		s.Image.PullPolicy = orPullPolicy(s.Image.PullPolicy, s.Image.Reference)
	case s.Ephemeral != nil && s.Ephemeral.VolumeClaimTemplate != nil:
		spec := &s.Ephemeral.VolumeClaimTemplate.Spec
		spec.VolumeMode = orDefault(spec.VolumeMode, ptr.To(corev1.PersistentVolumeFilesystem))
	default:
		defaultLegacySource(s)
	}
	return v
}

// defaultLegacySource applies the declarative defaults of the in-tree
// storage drivers.
func defaultLegacySource(s *corev1.VolumeSource) {
	switch {
	case s.ISCSI != nil:
		s.ISCSI.ISCSIInterface = orString(s.ISCSI.ISCSIInterface, "default")
	case s.RBD != nil:
		s.RBD.RBDPool = orString(s.RBD.RBDPool, "rbd")
		s.RBD.RadosUser = orString(s.RBD.RadosUser, "admin")
		s.RBD.Keyring = orString(s.RBD.Keyring, "/etc/ceph/keyring")
	case s.AzureDisk != nil:
		d := s.AzureDisk
		d.CachingMode = orDefault(d.CachingMode, ptr.To(corev1.AzureDataDiskCachingReadWrite))
		d.FSType = orDefault(d.FSType, new("ext4"))
		d.ReadOnly = orDefault(d.ReadOnly, new(false))
		d.Kind = orDefault(d.Kind, ptr.To(corev1.AzureSharedBlobDisk))
	case s.ScaleIO != nil:
		s.ScaleIO.StorageMode = orString(s.ScaleIO.StorageMode, "ThinProvisioned")
		s.ScaleIO.FSType = orString(s.ScaleIO.FSType, "xfs")
	}
}

func defaultFieldRefs(items []corev1.DownwardAPIVolumeFile) {
	for i := range items {
		if f := items[i].FieldRef; f != nil && f.APIVersion == "" {
			f.APIVersion = "v1"
		}
	}
}

// orPullPolicy is a pull policy as the apiserver stores it: when unset,
// Always for an image named by the tag latest or by none, else IfNotPresent.
func orPullPolicy(p corev1.PullPolicy, image string) corev1.PullPolicy {
	if p != "" {
		return p
	}
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if _, tag, ok := strings.Cut(name, ":"); !ok || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func orDefault[T any](p, def *T) *T {
	if p == nil {
		return def
	}
	return p
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
