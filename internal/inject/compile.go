package inject

import (
	"crypto/sha256"
	"encoding/hex"
	encjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// compiledSidecar is a Sidecar prepared once per revision: selectors parsed,
// templates compiled and every static part already encoded as JSON.
type compiledSidecar struct {
	name     string
	uid      string // metadata.uid; records are signed for it
	revision string
	// held is the older revision the Sidecar's rollout still serves
	// (status.currentRevision), nil when it serves only this one;
	// partition is the boundary whose workloads get it.
	held      *compiledSidecar
	partition string
	// pinKey is the pod annotation that pins a revision of it.
	pinKey string
	// generation is metadata.generation: it moves with every spec change,
	// including those the revision leaves out (rbac, allowRequestByName).
	generation int64
	native     bool
	exact      bool // integrity Exact: records verify byte for byte
	onMissing  v1alpha1.MissingParametersPolicy

	mandatory  bool            // a pod its selectors select must have it
	guarded    bool            // spec.Guarded(), written in its records: a pod carrying one is validated
	byName     bool            // a pod may request it with AnnotationInject
	selector   labels.Selector // nil: selects no pod by label
	nsSelector labels.Selector // nil: every namespace
	activation string

	params     []v1alpha1.Parameter
	paramIndex map[string]int
	// templated: it has parameters or templates, and so the template caps apply.
	templated bool

	// initContainers holds the Sidecar's init containers followed, for a
	// native sidecar, by its containers with restartPolicy Always.
	initContainers []renderedContainer
	containers     []renderedContainer
	// containerNames are those of initContainers then containers: what an
	// injection record lists and its digest covers, in that order.
	containerNames []string
	// appArmorKeys are the AppArmor annotations of those containers.
	appArmorKeys []string
	// static is what the record says of the containers when no template is
	// in them.
	static      *memoized
	digests     digestMemo
	volumes     [][]byte
	volumeNames []string
	// storedVolumes are the volumes as the apiserver stores them, in order.
	storedVolumes []*corev1.Volume
	appMounts     []corev1.VolumeMount
	appMountsJSON [][]byte
	pullSecret    string // the name of spec.imagePullSecret, if any
	// podMetadata are the labels and annotations it adds to its pods.
	podMetadata []metaValue
}

type renderedContainer struct {
	name string
	json *jsonTemplate
	// sizing computes its resources per pod, into renderData.sizes[sizeAt].
	sizing *sizing
	sizeAt int
	// static is what the digest covers of the container, when it has no template.
	static *signing.Content
}

// Revision returns the hash of a Sidecar's spec recorded in the status
// annotation. It hashes the spec as the apiserver stores it, defaults
// included, so that a file and the same Sidecar in a cluster agree.
func Revision(spec *v1alpha1.SidecarSpec) string {
	defaulted := *spec
	// RBAC changes what the operator grants, not what a pod gets: changing
	// it must not make injected pods outdated.
	defaulted.RBAC = nil
	// How a revision reaches pods, and whether pods must have it, are not part of it.
	defaulted.UpdateStrategy, defaulted.RevisionHistoryLimit, defaulted.Mandatory = nil, nil, false
	if defaulted.OnMissingParameters == "" {
		defaulted.OnMissingParameters = v1alpha1.MissingParametersReject
	}
	if defaulted.Integrity == v1alpha1.IntegrityTolerant {
		// The default, added with it: Sidecars keep the revision they had.
		defaulted.Integrity = ""
	}
	raw, err := encjson.Marshal(&defaulted)
	if err != nil {
		panic(err) // a SidecarSpec always marshals
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// mandatoryInvalid says why a mandatory Sidecar could not be held to.
func mandatoryInvalid(spec *v1alpha1.SidecarSpec) error {
	switch {
	case !spec.Mandatory:
		return nil
	case spec.Selector == nil:
		return errors.New("spec.selector: Required value: a mandatory Sidecar holds the pods its selector selects; set one ({} selects every pod)")
	case spec.Activation != nil:
		return errors.New("spec.activation: Forbidden: a mandatory Sidecar cannot have one: a pod would opt out by leaving the annotation off")
	case len(spec.Containers)+len(spec.InitContainers) == 0:
		return errors.New("spec.containers: Required value: a mandatory Sidecar is held to by its containers")
	}
	return nil
}

// Compile prepares one Sidecar. Its errors name the offending field.
// MaxContainers is the most containers and init containers one Sidecar
// injects. Each is compiled where the Sidecar is loaded and rendered and
// digested for each pod it selects; a forged review of 87,000 empty ones
// cost /validate-sidecars 541 MiB to compile.
const MaxContainers = 32

// TooManyContainers refuses a Sidecar of more than MaxContainers, before
// any of them is compiled.
func TooManyContainers(spec *v1alpha1.SidecarSpec) error {
	if n := len(spec.Containers) + len(spec.InitContainers); n > MaxContainers {
		return fmt.Errorf("%d containers and init containers, at most %d", n, MaxContainers)
	}
	return nil
}

func compile(sc *v1alpha1.Sidecar) (*compiledSidecar, error) {
	spec := &sc.Spec
	if err := TooManyContainers(spec); err != nil {
		return nil, fmt.Errorf("sidecar %q: spec.containers: %w", sc.Name, err)
	}
	c := &compiledSidecar{
		name:       sc.Name,
		uid:        string(sc.UID),
		exact:      sc.Spec.Exact(),
		generation: sc.Generation,
		revision:   Revision(spec),
		pinKey:     v1alpha1.AnnotationRevisionPrefix + sc.Name,
		byName:     spec.RequestByNameAllowed(),
		native:     spec.NativeSidecar,
		onMissing:  spec.OnMissingParameters,
		params:     spec.Parameters,
		paramIndex: make(map[string]int, len(spec.Parameters)),
		appMounts:  spec.AppVolumeMounts,
	}
	if spec.ImagePullSecret != nil {
		c.pullSecret = spec.ImagePullSecret.Name
	}
	if c.onMissing == "" {
		c.onMissing = v1alpha1.MissingParametersReject // the CRD's default
	}
	declared, errs := c.compileParameters(spec.Parameters)
	var err error
	if c.selector, err = selectorOrNil(spec.Selector); err != nil {
		errs = append(errs, fmt.Errorf("spec.selector: %w", err))
	}
	if c.nsSelector, err = selectorOrNil(spec.NamespaceSelector); err != nil {
		errs = append(errs, fmt.Errorf("spec.namespaceSelector: %w", err))
	}
	if spec.Activation != nil {
		c.activation = spec.Activation.Annotation
	}
	c.mandatory = spec.Mandatory
	c.guarded = spec.Guarded()
	if err := mandatoryInvalid(spec); err != nil {
		errs = append(errs, err)
	}

	names := map[string]string{}
	sizedAt := map[string]int{}
	templates := 0 // the templated strings of the Sidecar so far (countTemplate)
	for i, r := range spec.Resources {
		sizedAt[r.Container] = i
	}
	sized, entryAt := 0, 0
	addContainer := func(list *[]renderedContainer, ct corev1.Container, field string) {
		if prev, dup := names[ct.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: container name %q is also used by %s", field, ct.Name, prev))
			return
		}
		names[ct.Name] = field
		// Names are what records and the other rules read as written.
		if err := templatedName(&ct, field); err != nil {
			errs = append(errs, err)
			return
		}
		var entry *v1alpha1.ContainerResources
		if i, ok := sizedAt[ct.Name]; ok {
			delete(sizedAt, ct.Name)
			entry = &spec.Resources[i]
			entryAt = i
		}
		rc, err := compileContainer(ct, field, declared, entry, entryAt, &templates)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if rc.sizing != nil {
			rc.sizeAt = sized
			sized++
		}
		*list = append(*list, rc)
	}
	for i := range spec.InitContainers {
		addContainer(&c.initContainers, spec.InitContainers[i], fmt.Sprintf("spec.initContainers[%d]", i))
	}
	always := corev1.ContainerRestartPolicyAlways
	for i := range spec.Containers {
		ct := spec.Containers[i]
		field := fmt.Sprintf("spec.containers[%d]", i)
		if spec.NativeSidecar {
			ct.RestartPolicy = &always
			addContainer(&c.initContainers, ct, field)
		} else {
			addContainer(&c.containers, ct, field)
		}
	}

	for _, i := range slices.Sorted(maps.Values(sizedAt)) {
		errs = append(errs, fmt.Errorf("spec.resources[%d].container: %q is not a container of this Sidecar", i, spec.Resources[i].Container))
	}
	if n := len(c.initContainers) + len(c.containers); n > signing.MaxRecordContainers {
		errs = append(errs, fmt.Errorf("spec: %d containers and init containers, more than the %d a Sidecar may inject", n, signing.MaxRecordContainers))
	}
	c.templated = len(spec.Parameters) > 0
	static := true
	var statics []signing.Content
	for _, rc := range slices.Concat(c.initContainers, c.containers) {
		c.containerNames = append(c.containerNames, rc.name)
		c.appArmorKeys = append(c.appArmorKeys, appArmorAnnotationPrefix+rc.name)
		if rc.sizing != nil && rc.sizing.templated() {
			c.templated = true
		}
		if rc.static == nil {
			static, c.templated = false, true
		} else {
			statics = append(statics, *rc.static)
		}
	}
	errs = append(errs, c.compileVolumes(spec)...)
	if static {
		m, err := c.memoize(signing.Render(statics, len(c.initContainers), c.appMounts))
		if err != nil {
			errs = append(errs, err)
		}
		c.static = &m
	}
	if c.podMetadata, err = compilePodMetadata(spec.PodMetadata, declared, &templates); err != nil {
		errs = append(errs, err)
	}
	if slices.ContainsFunc(c.podMetadata, func(m metaValue) bool { return m.tmpl != nil }) {
		c.templated = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sidecar %q: %w", sc.Name, err)
	}
	return c, nil
}

// compileVolumes compiles the Sidecar's volumes and appVolumeMounts, once
// its containers are compiled.
func (c *compiledSidecar) compileVolumes(spec *v1alpha1.SidecarSpec) (errs []error) {
	volumes := map[string]bool{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if volumes[v.Name] {
			errs = append(errs, fmt.Errorf("spec.volumes[%d].name: duplicate volume %q", i, v.Name))
			continue
		}
		volumes[v.Name] = true
		raw, err := encjson.Marshal(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.volumes[%d]: %w", i, err))
			continue
		}
		c.volumes = append(c.volumes, raw)
		c.volumeNames = append(c.volumeNames, v.Name)
		c.storedVolumes = append(c.storedVolumes, signing.StoredVolume(v))
	}
	for i := range spec.AppVolumeMounts {
		raw, err := encjson.Marshal(&spec.AppVolumeMounts[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.appVolumeMounts[%d]: %w", i, err))
			continue
		}
		c.appMountsJSON = append(c.appMountsJSON, raw)
	}
	return errs
}

// compileContainer compiles one container, sized by entry, which is
// spec.resources[entryAt], when not nil.
func compileContainer(ct corev1.Container, field string, declared map[string]bool, entry *v1alpha1.ContainerResources,
	entryAt int, templates *int) (renderedContainer, error) {
	var sz *sizing
	if entry != nil {
		var err error
		if sz, err = compileSizing(entryAt, entry, ct.Resources, declared, templates); err != nil {
			return renderedContainer{}, err
		}
		ct.Resources = corev1.ResourceRequirements{}
	}
	jt, err := compileJSONTemplate(&ct, field, declared, templates)
	if err != nil {
		return renderedContainer{}, err
	}
	rc := renderedContainer{name: ct.Name, json: jt, sizing: sz}
	if len(jt.holes) == 0 {
		rc.static = &signing.Content{}
		if err := encjson.Unmarshal(jt.static[0], rc.static); err != nil {
			return rc, fmt.Errorf("%s: %w", field, err)
		}
	}
	if sz != nil {
		if err := jt.holeForResources(); err != nil {
			return rc, fmt.Errorf("%s: %w", field, err)
		}
	}
	return rc, nil
}

// compileParameters indexes the parameters and returns their names.
func (c *compiledSidecar) compileParameters(params []v1alpha1.Parameter) (declared map[string]bool, errs []error) {
	declared = make(map[string]bool, len(params))
	for i, p := range params {
		if declared[p.Name] {
			errs = append(errs, fmt.Errorf("spec.parameters[%d].name: duplicate parameter %q", i, p.Name))
		}
		declared[p.Name] = true
		c.paramIndex[p.Name] = i
		// The namespace's value is copied onto the pod under Annotation, as
		// podMetadata writes its keys, and is held to the same rules.
		if p.NamespaceAnnotation != "" {
			if bad := validation.IsQualifiedName(p.Annotation); len(bad) > 0 {
				errs = append(errs, fmt.Errorf("spec.parameters[%d].annotation: the key is not a qualified name: %s", i, strings.Join(bad, "; ")))
			} else if why := reservedKey(p.Annotation); why != "" {
				errs = append(errs, fmt.Errorf("spec.parameters[%d].annotation: %s, and the namespace's value would be copied onto the pod under it", i, why))
			}
		}
		if p.Default != nil && len(*p.Default) > MaxParameterValueLength {
			errs = append(errs, fmt.Errorf("spec.parameters[%d].default: %d bytes long, over the %d-byte cap of a parameter value",
				i, len(*p.Default), MaxParameterValueLength))
		}
	}
	return declared, errs
}

// templatedName refuses a template in a container's name or in the name
// of a volume it mounts: the record, the checks for clashing containers and
// the AppArmor annotation all read names as written.
func templatedName(ct *corev1.Container, field string) error {
	isTemplate := func(s string) bool { return strings.Contains(s, "{{") }
	if isTemplate(ct.Name) {
		return fmt.Errorf("%s.name: %q: a container's name cannot be a template", field, ct.Name)
	}
	for i, m := range ct.VolumeMounts {
		if isTemplate(m.Name) {
			return fmt.Errorf("%s.volumeMounts[%d].name: %q: a volume's name cannot be a template", field, i, m.Name)
		}
	}
	for i, d := range ct.VolumeDevices {
		if isTemplate(d.Name) {
			return fmt.Errorf("%s.volumeDevices[%d].name: %q: a volume's name cannot be a template", field, i, d.Name)
		}
	}
	return nil
}

func selectorOrNil(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// sidecarVolume returns the Sidecar's volume of that name as stored, nil if
// it has none.
func (c *compiledSidecar) sidecarVolume(name string) (*corev1.Volume, error) {
	if i := slices.Index(c.volumeNames, name); i >= 0 {
		return c.storedVolumes[i], nil
	}
	return nil, nil
}

// appArmorAnnotationPrefix starts the deprecated per-container AppArmor
// annotation, which the apiserver copies into the container's
// securityContext after the webhooks mutated the pod.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// appArmorAnnotationIn returns the AppArmor annotation the pod has for a
// container of the Sidecar's, if any.
func (c *compiledSidecar) appArmorAnnotationIn(annotations map[string]string) (string, bool) {
	for _, key := range c.appArmorKeys {
		if _, ok := annotations[key]; ok {
			return key, true
		}
	}
	return "", false
}

func (c *compiledSidecar) hasVolume(name string) bool {
	return slices.Contains(c.volumeNames, name)
}
