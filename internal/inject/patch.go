package inject

import (
	"bytes"
	encjson "encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// patchWriter appends RFC 6902 operations to a JSON array.
type patchWriter struct {
	buf []byte
	ops int
}

// add starts an "add" operation at path; the caller appends the value and calls end.
func (w *patchWriter) add(path string) {
	w.op()
	w.buf = append(w.buf, `{"op":"add","path":`...)
	w.buf = appendJSONString(w.buf, path)
	w.buf = append(w.buf, `,"value":`...)
}

// addIndexed is add for the path prefix+index+suffix, which needs no escaping.
func (w *patchWriter) addIndexed(prefix string, index int, suffix string) {
	w.op()
	w.buf = append(w.buf, `{"op":"add","path":"`...)
	w.buf = append(w.buf, prefix...)
	w.buf = strconv.AppendInt(w.buf, int64(index), 10)
	w.buf = append(w.buf, suffix...)
	w.buf = append(w.buf, `","value":`...)
}

func (w *patchWriter) op() {
	if w.ops == 0 {
		w.buf = append(w.buf, '[')
	} else {
		w.buf = append(w.buf, ',')
	}
	w.ops++
}

func (w *patchWriter) end() { w.buf = append(w.buf, '}') }

func (w *patchWriter) addRaw(path string, value []byte) {
	w.add(path)
	w.buf = append(w.buf, value...)
	w.end()
}

func (w *patchWriter) finish() []byte {
	if w.ops == 0 {
		return nil
	}
	return append(w.buf, ']')
}

// escapePointer escapes one JSON Pointer token (RFC 6901): "~" then "/".
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	out, err := jsonscan.AppendQuote(dst, s)
	if err == nil {
		return out
	}
	raw, _ := encjson.Marshal(s)
	return append(dst, raw...)
}

var (
	statusPath = "/metadata/annotations/" + escapePointer(v1alpha1.AnnotationStatus)
	labelPath  = "/metadata/labels/" + escapePointer(v1alpha1.LabelInjected)
)

// writePatch renders the plan as a JSON Patch into buf.
func (p *plan) writePatch(buf []byte) ([]byte, error) {
	p.budget.refill()
	w := patchWriter{buf: buf}
	if p.addMetadata {
		w.addRaw("/metadata", []byte("{}"))
	}
	if p.addSpec {
		w.addRaw("/spec", []byte("{}"))
	}
	if p.pod.Metadata.Annotations == nil {
		w.add("/metadata/annotations")
		w.buf = append(w.buf, `{"`+v1alpha1.AnnotationStatus+`":`...)
		w.buf = append(w.buf, p.statusLiteral...)
		w.buf = p.appendMetadata(w.buf, false)
		w.buf = append(w.buf, '}')
		w.end()
	} else {
		w.add(statusPath)
		w.buf = append(w.buf, p.statusLiteral...)
		w.end()
		p.writeMetadata(&w, false)
	}
	if p.pod.Metadata.Labels == nil {
		w.add("/metadata/labels")
		w.buf = append(w.buf, `{"`+v1alpha1.LabelInjected+`":"true"`...)
		w.buf = p.appendMetadata(w.buf, true)
		w.buf = append(w.buf, '}')
		w.end()
	} else {
		if p.addLabel {
			w.addRaw(labelPath, []byte(`"true"`))
		}
		p.writeMetadata(&w, true)
	}

	// Init containers go before the pod's own, in Sidecar order.
	var err error
	if p.pod.Spec.InitContainers == nil {
		err = p.writeArray(&w, "/spec/initContainers", func(s *selection) []renderedContainer { return s.sc.initContainers })
	} else {
		at := 0
		for i := range p.selected {
			s := &p.selected[i]
			for _, c := range s.sc.initContainers {
				w.addIndexed("/spec/initContainers/", at, "")
				if w.buf, err = s.appendContainer(w.buf, c); err != nil {
					return nil, err
				}
				w.end()
				at++
			}
		}
	}
	if err != nil {
		return nil, err
	}

	p.writeAppMounts(&w)

	if p.pod.Spec.Containers == nil {
		err = p.writeArray(&w, "/spec/containers", func(s *selection) []renderedContainer { return s.sc.containers })
	} else {
		for i := range p.selected {
			s := &p.selected[i]
			for _, c := range s.sc.containers {
				w.add("/spec/containers/-")
				if w.buf, err = s.appendContainer(w.buf, c); err != nil {
					return nil, err
				}
				w.end()
			}
		}
	}
	if err != nil {
		return nil, err
	}

	p.writeVolumes(&w)
	p.writePullSecrets(&w)
	return w.finish(), nil
}

// appendMetadata appends the plan's labels (label) or annotations as
// members of an object that has one already.
func (p *plan) appendMetadata(buf []byte, label bool) []byte {
	for _, m := range p.metadata {
		if m.label == label {
			buf = append(buf, ',')
			buf = appendJSONString(buf, m.key)
			buf = append(buf, ':')
			buf = appendJSONString(buf, m.value)
		}
	}
	return buf
}

// writeMetadata adds the plan's labels (label) or annotations one by one:
// "add" replaces a member that exists.
func (p *plan) writeMetadata(w *patchWriter, label bool) {
	prefix := "/metadata/annotations/"
	if label {
		prefix = "/metadata/labels/"
	}
	for _, m := range p.metadata {
		if m.label == label {
			w.add(prefix + escapePointer(m.key))
			w.buf = appendJSONString(w.buf, m.value)
			w.end()
		}
	}
}

// writeAppMounts mounts the Sidecars' shared volumes into the pod's own
// containers: a whole array where a container has no volumeMounts, else
// appended one by one.
func (p *plan) writeAppMounts(w *patchWriter) {
	for i := 0; i < len(p.appMounts); {
		ci := p.appMounts[i].container
		if p.pod.Spec.Containers[ci].VolumeMounts == nil {
			w.addIndexed("/spec/containers/", ci, "/volumeMounts")
			w.buf = append(w.buf, '[')
			for ; i < len(p.appMounts) && p.appMounts[i].container == ci; i++ {
				if w.buf[len(w.buf)-1] != '[' {
					w.buf = append(w.buf, ',')
				}
				w.buf = append(w.buf, p.mountJSON(p.appMounts[i])...)
			}
			w.buf = append(w.buf, ']')
			w.end()
			continue
		}
		for ; i < len(p.appMounts) && p.appMounts[i].container == ci; i++ {
			w.addIndexed("/spec/containers/", ci, "/volumeMounts/-")
			w.buf = append(w.buf, p.mountJSON(p.appMounts[i])...)
			w.end()
		}
	}
}

// writeVolumes adds the Sidecars' volumes the pod lacks.
func (p *plan) writeVolumes(w *patchWriter) {
	newVolumes := p.pod.Spec.Volumes == nil
	first := true
	for _, s := range p.selected {
		for vi, name := range s.sc.volumeNames {
			if p.pod.hasVolume(name) {
				continue
			}
			switch {
			case !newVolumes:
				w.addRaw("/spec/volumes/-", s.sc.volumes[vi])
				continue
			case first:
				w.add("/spec/volumes")
				w.buf = append(w.buf, '[')
				first = false
			default:
				w.buf = append(w.buf, ',')
			}
			w.buf = append(w.buf, s.sc.volumes[vi]...)
		}
	}
	if newVolumes && !first {
		w.buf = append(w.buf, ']')
		w.end()
	}
}

// writePullSecrets adds the image pull secrets the Sidecars need.
func (p *plan) writePullSecrets(w *patchWriter) {
	for i, name := range p.pullSecrets {
		switch {
		case p.pod.Spec.ImagePullSecrets != nil:
			w.add("/spec/imagePullSecrets/-")
		case i == 0:
			w.add("/spec/imagePullSecrets")
			w.buf = append(w.buf, '[')
		default:
			w.buf = append(w.buf, ',')
		}
		w.buf = append(w.buf, `{"name":`...)
		w.buf = appendJSONString(w.buf, name)
		w.buf = append(w.buf, '}')
		if p.pod.Spec.ImagePullSecrets != nil {
			w.end()
		}
	}
	if p.pod.Spec.ImagePullSecrets == nil && len(p.pullSecrets) > 0 {
		w.buf = append(w.buf, ']')
		w.end()
	}
}

// writeArray adds a whole array at path, made of each selection's containers.
func (p *plan) writeArray(w *patchWriter, path string, list func(*selection) []renderedContainer) error {
	opened := false
	for i := range p.selected {
		s := &p.selected[i]
		for _, c := range list(s) {
			if !opened {
				w.add(path)
				w.buf = append(w.buf, '[')
				opened = true
			} else {
				w.buf = append(w.buf, ',')
			}
			var err error
			if w.buf, err = s.appendContainer(w.buf, c); err != nil {
				return err
			}
		}
	}
	if opened {
		w.buf = append(w.buf, ']')
		w.end()
	}
	return nil
}

func (p *plan) mountJSON(m appMount) []byte {
	return p.selected[m.sel].sc.appMountsJSON[m.index]
}

// mutate applies the plan to a copy of pod and returns it.
func (p *plan) mutate(pod *corev1.Pod) (*corev1.Pod, error) {
	p.budget.refill()
	out := pod.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	var status string
	if err := encjson.Unmarshal(p.statusLiteral, &status); err != nil {
		return nil, fmt.Errorf("the status annotation seal wrote is not a JSON string: %w", err)
	}
	out.Annotations[v1alpha1.AnnotationStatus] = status
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[v1alpha1.LabelInjected] = "true"
	for _, m := range p.metadata {
		if m.label {
			out.Labels[m.key] = m.value
		} else {
			out.Annotations[m.key] = m.value
		}
	}
	var inits, containers []corev1.Container
	var volumes []corev1.Volume
	var scratch []byte
	for i := range p.selected {
		s := &p.selected[i]
		for _, group := range []struct {
			from []renderedContainer
			to   *[]corev1.Container
		}{{s.sc.initContainers, &inits}, {s.sc.containers, &containers}} {
			for _, c := range group.from {
				var err error
				if scratch, err = s.appendContainer(scratch[:0], c); err != nil {
					return nil, err
				}
				var ct corev1.Container
				if err := encjson.Unmarshal(scratch, &ct); err != nil {
					return nil, err
				}
				*group.to = append(*group.to, ct)
			}
		}
		for vi, name := range s.sc.volumeNames {
			if p.pod.hasVolume(name) {
				continue
			}
			var v corev1.Volume
			if err := encjson.Unmarshal(s.sc.volumes[vi], &v); err != nil {
				return nil, err
			}
			volumes = append(volumes, v)
		}
	}
	for _, m := range p.appMounts {
		c := &out.Spec.Containers[m.container]
		c.VolumeMounts = append(c.VolumeMounts, p.appMount(m))
	}
	if len(inits) > 0 {
		out.Spec.InitContainers = append(inits, out.Spec.InitContainers...)
	}
	out.Spec.Containers = append(out.Spec.Containers, containers...)
	out.Spec.Volumes = append(out.Spec.Volumes, volumes...)
	for _, name := range p.pullSecrets {
		out.Spec.ImagePullSecrets = append(out.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	return out, nil
}

// rendering is what a record says of the containers a selection injects.
type rendering = signing.Rendering

// rendered is the rendering of what the selection injects, its templated
// containers rendered for this pod, and its volume digest when that does
// not depend on the pod (the containers mount only the Sidecar's volumes).
// Reading the rendering back and hashing its volumes cost more than the
// rest of an injection, and the pods of one workload render alike, so both
// are remembered by the rendered JSON.
func (s *selection) rendered() (*memoized, error) {
	if s.sc.static != nil {
		return s.sc.static, nil
	}
	// The rendering is read only here: the memo keeps a copy of its key.
	buf := renderBufs.Get().(*[]byte)
	defer renderBufs.Put(buf)
	raw := (*buf)[:0]
	defer func() {
		if cap(raw) <= maxPooledRender { // keep what it grew to, within reason
			*buf = raw[:0]
		}
	}()
	for _, list := range [2][]renderedContainer{s.sc.initContainers, s.sc.containers} {
		for _, c := range list {
			var err error
			if raw, err = s.appendContainer(append(raw, '\n'), c); err != nil {
				return nil, err
			}
		}
	}
	if m, ok := s.sc.digests.get(raw); ok {
		return m, nil
	}
	list := make([]signing.Content, 0, len(s.sc.containerNames))
	dec := encjson.NewDecoder(bytes.NewReader(raw))
	for range s.sc.containerNames {
		var ct signing.Content
		if err := dec.Decode(&ct); err != nil {
			return nil, err
		}
		// A templated path escapes validation: judge what it rendered.
		for _, m := range ct.VolumeMounts {
			if signing.AtTokenPath(m.MountPath) {
				return nil, fmt.Errorf("sidecar %q, container %q: mountPath %q is where the pod's ServiceAccount token is mounted",
					s.sc.name, ct.Name, m.MountPath)
			}
		}
		list = append(list, ct)
	}
	m, err := s.sc.memoize(signing.Render(list, len(s.sc.initContainers), s.sc.appMounts))
	if err != nil {
		return nil, err
	}
	s.sc.digests.put(raw, &m)
	return &m, nil
}

// memoized is a rendering, with its volume digest when that is the same
// for every pod ("" when the containers mount a pod's volume).
type memoized struct {
	rendering
	volumeDigest string
}

// memoize is r, with its volume digest if it mounts only the Sidecar's volumes.
func (c *compiledSidecar) memoize(r rendering) (memoized, error) {
	m := memoized{rendering: r}
	if slices.ContainsFunc(r.Mounted, func(name string) bool { return !c.hasVolume(name) }) {
		return m, nil
	}
	var err error
	m.volumeDigest, err = signing.VolumeDigest(r.Mounted, c.sidecarVolume)
	return m, err
}

// volumeDigest is the digest of the volumes the rendered containers mount:
// the Sidecar's, else the pod's of that name.
func (s *selection) volumeDigest(m *memoized, podVolume func(string) (*corev1.Volume, error)) (string, error) {
	if m.volumeDigest != "" {
		return m.volumeDigest, nil
	}
	return signing.VolumeDigest(m.Mounted, func(name string) (*corev1.Volume, error) {
		if s.sc.hasVolume(name) {
			return s.sc.sidecarVolume(name)
		}
		return podVolume(name)
	})
}

// renderBufs hold renderings while they are looked up in the memo; one
// grown past maxPooledRender (a template renders up to 256 KiB) is let go.
var renderBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledRender = 64 << 10

type digestMemo struct {
	mu sync.Mutex
	// m is keyed by the rendered JSON itself: a map hashes a string key
	// faster than SHA-256 (a tenth of a review was that hash), and compares
	// it whole, so no two renderings can share an entry.
	m     map[string]*memoized
	bytes int
}

// A memo starts over past maxDigests entries or maxDigestBytes. An entry
// holds memoCost times its key's length: the key, and the rendering's
// strings (images, names) copied out of it.
const (
	maxDigests     = 4096
	maxDigestBytes = 4 << 20
	memoCost       = 3
)

func (m *digestMemo) get(raw []byte) (*memoized, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.m[string(raw)]
	return d, ok
}

func (m *digestMemo) put(raw []byte, r *memoized) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= maxDigests || m.bytes+memoCost*len(raw) > maxDigestBytes {
		m.m, m.bytes = make(map[string]*memoized), 0
	}
	m.m[string(raw)] = r
	m.bytes += memoCost * len(raw)
}

// appendContainer renders one container of the selection as JSON.
func (s *selection) appendContainer(dst []byte, c renderedContainer) ([]byte, error) {
	var sized []byte
	if c.sizing != nil {
		sized = s.render.sizes[c.sizeAt]
	}
	out, err := c.json.appendTo(dst, &s.render, sized)
	if err != nil {
		return out, fmt.Errorf("sidecar %q, container %q: %w", s.sc.name, c.name, err)
	}
	return out, nil
}
