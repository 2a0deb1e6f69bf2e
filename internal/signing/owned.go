package signing

import (
	"crypto/sha256"
	"encoding/base64"
	encjson "encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// What the webhook set in an injected container, so that verification can
// hold the container to it while other admission actors add beside it
// (record field owned). See docs/security.md (Security model) for each field.

// Rendering is what a record says of the containers a Sidecar injected.
type Rendering struct {
	Digest string
	// Owned is the record's owned field.
	Owned string
	// Mounted names the volumes the containers mount.
	Mounted []string
	// Images are the containers' images, in order: what an upgrade in
	// place writes.
	Images []string
}

// Render reads the containers the webhook rendered, the first inits of them
// init containers, and shared, the mounts the Sidecar adds to the pod's
// containers (appVolumeMounts): their digest, what each set, and the
// volumes they mount. It applies the apiserver's defaults to list in place.
func Render(list []Content, inits int, shared []corev1.VolumeMount) Rendering {
	mounted := MountedVolumes(list)
	pullAlways := make([]bool, len(list))
	for i := range list {
		pullAlways[i] = orPullPolicy(list[i].ImagePullPolicy, list[i].Image) == corev1.PullAlways
	}
	digest := DigestContents(list) // list is now as stored
	var owned []byte
	for i := range list {
		if i > 0 {
			owned = append(owned, ',')
		}
		owned = appendOwned(owned, &list[i], i < inits, pullAlways[i])
	}
	if len(shared) > 0 {
		names := make([]string, len(shared))
		for i := range shared {
			names[i] = sharedMount(&shared[i])
		}
		owned = append(append(owned, ';'), strings.Join(slices.Compact(slices.Sorted(slices.Values(names))), "|")...)
	}
	images := make([]string, len(list))
	for i := range list {
		images[i] = list[i].Image
	}
	return Rendering{Digest: digest, Owned: string(owned), Mounted: mounted, Images: images}
}

// The securityContext fields an admission actor may set where the webhook
// left them unset, each only to a value that restricts the container.
const (
	scSet uint16 = 1 << iota // securityContext itself
	scPrivileged
	scAllowPrivilegeEscalation
	scRunAsNonRoot
	scReadOnlyRootFilesystem
	scRunAsUser
	scRunAsGroup
	scSeccompProfile
	scAppArmorProfile
	scCapabilities
	scCapabilitiesDrop
)

func securityContextBits(sc *corev1.SecurityContext) uint16 {
	if sc == nil {
		return 0
	}
	bits := scSet
	for _, f := range []struct {
		set bool
		bit uint16
	}{
		{sc.Privileged != nil, scPrivileged}, {sc.AllowPrivilegeEscalation != nil, scAllowPrivilegeEscalation},
		{sc.RunAsNonRoot != nil, scRunAsNonRoot}, {sc.ReadOnlyRootFilesystem != nil, scReadOnlyRootFilesystem},
		{sc.RunAsUser != nil, scRunAsUser}, {sc.RunAsGroup != nil, scRunAsGroup},
		{sc.SeccompProfile != nil, scSeccompProfile}, {sc.AppArmorProfile != nil, scAppArmorProfile},
		{sc.Capabilities != nil, scCapabilities}, {sc.Capabilities != nil && sc.Capabilities.Drop != nil, scCapabilitiesDrop},
	} {
		if f.set {
			bits |= f.bit
		}
	}
	return bits
}

// fieldGroups are the covered fields, each hashed apart into owned so that
// a failed verification can name what changed. The hashes only locate: the
// digest decides.
var fieldGroups = []fieldGroup{
	{"image", func(c *Content) any { return c.Image }},
	{"command", func(c *Content) any { return c.Command }},
	{"args", func(c *Content) any { return c.Args }},
	{"workingDir", func(c *Content) any { return c.WorkingDir }},
	{"terminationMessagePath", func(c *Content) any { return c.TerminationMessagePath }},
	{"restartPolicy", func(c *Content) any { return []any{c.RestartPolicy, c.RestartPolicyRules} }},
	{"env", func(c *Content) any { return c.Env }},
	{"envFrom", func(c *Content) any { return c.EnvFrom }},
	{"securityContext", func(c *Content) any { return c.SecurityContext }},
	{"volumeMounts", func(c *Content) any { return c.VolumeMounts }},
	{"volumeDevices", func(c *Content) any { return c.VolumeDevices }},
	{"probes", func(c *Content) any { return []any{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} }},
	{"lifecycle", func(c *Content) any { return c.Lifecycle }},
}

type fieldGroup struct {
	name string
	of   func(*Content) any
}

// locatorBytes is how much of each group's hash owned keeps.
const locatorBytes = 3

// fieldHashes hashes each group of a stored content.
func fieldHashes(c *Content) []byte {
	out := make([]byte, 0, len(fieldGroups)*locatorBytes)
	for g := range fieldGroups {
		out = append(out, groupHash(g, c)...)
	}
	return out
}

func groupHash(g int, c *Content) []byte {
	raw, err := encjson.Marshal(fieldGroups[g].of(c))
	if err != nil {
		panic(err) // these types always marshal
	}
	sum := sha256.Sum256(raw)
	return sum[:locatorBytes]
}

// The groups of env and volumeMounts, whose entries others add beside.
var envGroup, mountsGroup = groupIndex("env"), groupIndex("volumeMounts")

func groupIndex(name string) int {
	i := slices.IndexFunc(fieldGroups, func(g fieldGroup) bool { return g.name == name })
	if i < 0 {
		panic("signing: no field group " + name)
	}
	return i
}

// locator is group g's hash in hashes (owned's, decoded); nil when they
// are too short, as no signed record's are.
func locator(hashes []byte, g int) []byte {
	at := g * locatorBytes
	if at+locatorBytes > len(hashes) {
		return nil
	}
	return hashes[at : at+locatorBytes]
}

// MaxAddedEntries bounds the env entries, and the volumeMounts, that others
// may add to one injected container: finding the webhook's among them
// costs a hash per place they could be, on every pass of the controllers.
const MaxAddedEntries = 256

// ownedWindow finds where in list the n entries the webhook set are: other
// actors add before them (a strategic merge patch, as Kyverno's, puts its
// entries first) or after (a JSON patch appending). It is the first window
// whose hash is what owned says; 0 when none is, and the digest then fails.
func ownedWindow[T any](list []T, n int, want []byte, hashOf func([]T) []byte) int {
	if len(list) == n || want == nil {
		return 0
	}
	for at := 0; at+n <= len(list); at++ {
		if string(hashOf(list[at:at+n])) == string(want) {
			return at
		}
	}
	return 0
}

// appendOwned writes "<i|r>[A]<env>.<mounts>.<securityContext bits>.<field
// hashes>", A when the webhook set imagePullPolicy Always.
func appendOwned(dst []byte, c *Content, init, pullAlways bool) []byte {
	kind := byte('r')
	if init {
		kind = 'i'
	}
	dst = append(dst, kind)
	if pullAlways {
		dst = append(dst, 'A')
	}
	dst = strconv.AppendInt(dst, int64(len(c.Env)), 10)
	dst = strconv.AppendInt(append(dst, '.'), int64(len(c.VolumeMounts)), 10)
	dst = strconv.AppendUint(append(dst, '.'), uint64(securityContextBits(c.SecurityContext)), 10)
	return base64.RawURLEncoding.AppendEncode(append(dst, '.'), fieldHashes(c))
}

// sharedMount says what a mount of a volume the Sidecar shares reaches of
// it: "<volume>", or "<volume>:<subPath>:<subPathExpr>" with both base64url,
// so that a mount of the whole volume, or of another part, is told apart.
func sharedMount(m *corev1.VolumeMount) string {
	if m.SubPath == "" && m.SubPathExpr == "" {
		return m.Name
	}
	enc := base64.RawURLEncoding
	return m.Name + ":" + enc.EncodeToString([]byte(m.SubPath)) + ":" + enc.EncodeToString([]byte(m.SubPathExpr))
}

// ownedEntry is one container's part of owned.
type ownedEntry struct {
	init, pullAlways bool
	env, mounts      int
	sc               uint16
	fields           string // base64url, decoded only to name what changed
}

// parseOwned reads owned for n containers, and the volumes the Sidecar
// shares with the pod's containers; a record the webhook signed always
// parses.
func parseOwned(owned string, n int) ([]ownedEntry, []string, error) {
	owned, sharedList, _ := strings.Cut(owned, ";")
	var shared []string
	if sharedList != "" {
		shared = strings.Split(sharedList, "|")
	}
	out := make([]ownedEntry, 0, n)
	for rest, more := owned, true; more; {
		var part string
		part, rest, more = strings.Cut(rest, ",")
		e, ok := parseOwnedEntry(part)
		if !ok || len(out) == n {
			return nil, nil, fmt.Errorf("%w: owned %q does not describe the record's %d containers", ErrBadSignature, abbreviated(owned), n)
		}
		out = append(out, e)
	}
	if len(out) != n {
		return nil, nil, fmt.Errorf("%w: owned describes %d containers, the record names %d", ErrBadSignature, len(out), n)
	}
	return out, shared, nil
}

func parseOwnedEntry(p string) (ownedEntry, bool) {
	var e ownedEntry
	if len(p) < 2 || p[0] != 'i' && p[0] != 'r' {
		return e, false
	}
	e.init = p[0] == 'i'
	p = p[1:]
	if strings.HasPrefix(p, "A") {
		e.pullAlways, p = true, p[1:]
	}
	env, p, ok1 := strings.Cut(p, ".")
	mounts, p, ok2 := strings.Cut(p, ".")
	sc, fields, ok3 := strings.Cut(p, ".")
	var errs [3]error
	e.env, errs[0] = strconv.Atoi(env)
	e.mounts, errs[1] = strconv.Atoi(mounts)
	bits, err := strconv.ParseUint(sc, 10, 16)
	e.sc, errs[2], e.fields = uint16(bits), err, fields
	return e, ok1 && ok2 && ok3 && errs == [3]error{} && e.env >= 0 && e.mounts >= 0
}

// abbreviated keeps an error short whatever a record holds.
func abbreviated(s string) string {
	if len(s) > 128 {
		return s[:128] + "…"
	}
	return s
}

// drift collects what changed in the injected containers after injection.
type drift []string

func (d *drift) add(format string, args ...any) { *d = append(*d, fmt.Sprintf(format, args...)) }

func (d drift) err() error {
	if len(d) == 0 {
		return nil
	}
	const most = 4 // a message stays readable whatever the pod holds
	more := ""
	if len(d) > most {
		more = fmt.Sprintf("; and %d more", len(d)-most)
		d = d[:most]
	}
	return fmt.Errorf("%w: %s%s", ErrContentChanged, strings.Join(d, "; "), more)
}

// ours is what the webhook set in one injected container, cut out of the
// container as stored, and what was added to it.
type ours struct {
	content   Content
	addedEnv  []corev1.EnvVar
	addedRefs []corev1.VolumeMount // added mounts, but the ServiceAccount token's
}

// cut splits a stored container into what the webhook set and what others
// added, noting in d what breaks the rules for additions; exact allows
// none but the ServiceAccount token's mount.
func cut(pod *corev1.Pod, c *corev1.Container, e *ownedEntry, exact bool, d *drift) ours {
	o := ours{content: contentOf(c)}
	ct := &o.content
	where := quoted(c.Name)
	if pull := orPullPolicy(c.ImagePullPolicy, c.Image); e.pullAlways && pull != corev1.PullAlways {
		d.add("%s: imagePullPolicy is %q, and the webhook set Always: a build the node cached could run", where, pull)
	}
	var hashes []byte // lazily: what owned says of each field
	if len(ct.Env) > e.env || len(ct.VolumeMounts) > e.mounts {
		hashes, _ = base64.RawURLEncoding.DecodeString(e.fields) // a signed record's decodes
	}
	switch {
	case len(ct.Env) < e.env:
		d.add("%s: env has %d entries, the webhook set %d", where, len(ct.Env), e.env)
	case len(ct.Env)-e.env > MaxAddedEntries:
		d.add("%s: %d env entries were added after injection, more than the %d tolerated", where, len(ct.Env)-e.env, MaxAddedEntries)
	default:
		at := ownedWindow(ct.Env, e.env, locator(hashes, envGroup), func(env []corev1.EnvVar) []byte {
			return groupHash(envGroup, &Content{Env: storedEnv(env)})
		})
		o.addedEnv = slices.Concat(ct.Env[:at], ct.Env[at+e.env:])
		ct.Env = ct.Env[at : at+e.env : at+e.env]
	}
	switch {
	case len(ct.VolumeMounts) < e.mounts:
		d.add("%s: volumeMounts has %d entries, the webhook set %d", where, len(ct.VolumeMounts), e.mounts)
	case len(ct.VolumeMounts)-e.mounts > MaxAddedEntries:
		d.add("%s: %d volumeMounts were added after injection, more than the %d tolerated", where, len(ct.VolumeMounts)-e.mounts, MaxAddedEntries)
	default:
		at := ownedWindow(ct.VolumeMounts, e.mounts, locator(hashes, mountsGroup), func(m []corev1.VolumeMount) []byte {
			return groupHash(mountsGroup, &Content{VolumeMounts: m})
		})
		added := slices.Concat(ct.VolumeMounts[:at], ct.VolumeMounts[at+e.mounts:])
		ct.VolumeMounts = ct.VolumeMounts[at : at+e.mounts : at+e.mounts]
		for i := range added {
			m := &added[i]
			switch {
			case isTokenMount(m) && isTokenVolume(pod, m.Name):
			case isTokenMount(m) || AtTokenPath(m.MountPath):
				d.add("%s: a volumeMount of volume %q where the ServiceAccount token goes was added, and it is not the token", where, m.Name)
			default:
				o.addedRefs = append(o.addedRefs, *m)
			}
		}
	}
	if exact {
		for _, v := range o.addedEnv {
			d.add("%s: env %q was added after injection, and the Sidecar's integrity is Exact", where, v.Name)
		}
		for _, m := range o.addedRefs {
			d.add("%s: a volumeMount at %s was added after injection, and the Sidecar's integrity is Exact", where, m.MountPath)
		}
		return o
	}
	ct.SecurityContext = withoutHardening(ct.SecurityContext, e.sc, where, d)
	return o
}

// quoted names a container in drift, formatted only when it is reported.
type quoted string

func (q quoted) String() string { return fmt.Sprintf("container %q", string(q)) }

// withoutHardening takes out of sc the fields the webhook left unset that
// another actor set to a value that restricts the container; any other such
// field goes into d.
func withoutHardening(sc *corev1.SecurityContext, set uint16, where quoted, d *drift) *corev1.SecurityContext {
	if sc == nil {
		return nil
	}
	sc = sc.DeepCopy()
	for _, f := range []struct {
		bit        uint16
		name       string
		present    bool
		restricts  bool
		clearField func()
	}{
		{scPrivileged, "privileged", sc.Privileged != nil, sc.Privileged != nil && !*sc.Privileged, func() { sc.Privileged = nil }},
		{scAllowPrivilegeEscalation, "allowPrivilegeEscalation", sc.AllowPrivilegeEscalation != nil,
			sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, func() { sc.AllowPrivilegeEscalation = nil }},
		{scRunAsNonRoot, "runAsNonRoot", sc.RunAsNonRoot != nil, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, func() { sc.RunAsNonRoot = nil }},
		{scReadOnlyRootFilesystem, "readOnlyRootFilesystem", sc.ReadOnlyRootFilesystem != nil,
			sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, func() { sc.ReadOnlyRootFilesystem = nil }},
		{scRunAsUser, "runAsUser", sc.RunAsUser != nil, sc.RunAsUser != nil && *sc.RunAsUser != 0, func() { sc.RunAsUser = nil }},
		{scRunAsGroup, "runAsGroup", sc.RunAsGroup != nil, sc.RunAsGroup != nil && *sc.RunAsGroup != 0, func() { sc.RunAsGroup = nil }},
		{scSeccompProfile, "seccompProfile", sc.SeccompProfile != nil,
			sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined, func() { sc.SeccompProfile = nil }},
		{scAppArmorProfile, "appArmorProfile", sc.AppArmorProfile != nil,
			sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined, func() { sc.AppArmorProfile = nil }},
		{scCapabilitiesDrop, "capabilities.drop", sc.Capabilities != nil && sc.Capabilities.Drop != nil, true, func() { sc.Capabilities.Drop = nil }},
	} {
		if set&f.bit != 0 || !f.present {
			continue
		}
		if !f.restricts {
			d.add("%s: securityContext.%s was set after injection, to a value that does not restrict the container", where, f.name)
			continue
		}
		f.clearField()
	}
	if set&scCapabilities == 0 && sc.Capabilities != nil && sc.Capabilities.Add == nil && sc.Capabilities.Drop == nil {
		sc.Capabilities = nil
	}
	if set&scSet == 0 && *sc == (corev1.SecurityContext{}) {
		return nil
	}
	return sc
}

// verifyOwned checks the injected containers of a record that says what
// the webhook set (owned) against the pod as stored: what the webhook set
// is all there and unchanged, and what others added cannot shadow it.
func verifyOwned(pod *corev1.Pod, rec *v1alpha1.InjectionRecord, containers []corev1.Container, exact bool) error {
	entries, shared, err := parseOwned(rec.Owned, len(containers))
	if err != nil {
		return err
	}
	var d drift
	cuts := make([]ours, len(containers))
	list := make([]Content, len(containers))
	for i := range containers {
		cuts[i] = cut(pod, &containers[i], &entries[i], exact, &d)
		list[i] = cuts[i].content
	}
	mounted := MountedVolumes(list)
	credential := heldCredential(pod, list, mounted)
	checkAdditions(cuts, mounted, credential, &d)
	checkOthers(pod, rec, entries, mounted, shared, credential, &d)
	if err := d.err(); err != nil {
		return err
	}
	pinned := !exact && credential == "" // a pin may name any build of the repository
	if !digestMatches(list, rec.Digest, pinned) {
		return changedFields(list, entries, pinned)
	}
	if got, _ := VolumeDigest(mounted, podVolume(pod)); got != rec.VolumeDigest { // podVolume fails never
		return fmt.Errorf("%w: %s", ErrVolumesChanged, strings.Join(mounted, ", "))
	}
	return nil
}

// checkAdditions: an added env entry may not take a name the webhook set
// (the last entry of a name wins), one its envFrom may set, or one its
// command, args or env read as $(NAME); an added mount may not reach the
// webhook's volumes or paths. Nothing may be added to the containers of a
// Sidecar that holds a credential: what reaches their code or files
// reaches the credential.
func checkAdditions(cuts []ours, mounted []string, credential string, d *drift) {
	for i := range cuts {
		o := &cuts[i]
		where := quoted(o.content.Name)
		if credential != "" && (len(o.addedEnv) > 0 || len(o.addedRefs) > 0) {
			d.add("%s: %s was added after injection, and the sidecar holds %s", where, describeAdded(o), credential)
			continue
		}
		if len(o.addedEnv) > 0 && len(o.content.EnvFrom) > 0 {
			d.add("%s: env %q was added after injection, and the webhook set envFrom, whose names it could override", where, o.addedEnv[0].Name)
			continue
		}
		var read []string // lazily: the names the webhook's strings expand
		for _, v := range o.addedEnv {
			if slices.ContainsFunc(o.content.Env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
				d.add("%s: env %q was added again after injection, overriding the webhook's", where, v.Name)
				continue
			}
			if read == nil {
				read = expanded(&o.content)
			}
			if slices.Contains(read, v.Name) {
				d.add("%s: env %q was added after injection, and the webhook's command, args or env read it as $(%s)", where, v.Name, v.Name)
			}
		}
		for _, m := range o.addedRefs {
			if slices.Contains(mounted, m.Name) {
				d.add("%s: a volumeMount at %s of the sidecar's volume %q was added after injection", where, m.MountPath, m.Name)
				continue
			}
			for _, own := range o.content.VolumeMounts {
				if overlaps(m.MountPath, own.MountPath) {
					d.add("%s: a volumeMount at %s was added after injection over the webhook's at %s", where, m.MountPath, own.MountPath)
				}
			}
		}
	}
}

// expanded names the variables that the container's command, args, env
// values and subPathExprs read as $(NAME); never empty, so that it is
// computed once.
func expanded(c *Content) []string {
	out := []string{""}
	scan := func(s string) {
		for {
			i := strings.Index(s, "$(")
			if i < 0 {
				return
			}
			s = s[i+2:]
			if j := strings.IndexByte(s, ')'); j >= 0 {
				out = append(out, s[:j])
				s = s[j+1:]
			}
		}
	}
	for _, list := range [][]string{c.Command, c.Args} {
		for _, s := range list {
			scan(s)
		}
	}
	for _, e := range c.Env {
		scan(e.Value)
	}
	for _, m := range c.VolumeMounts {
		scan(m.SubPathExpr)
	}
	return out
}

func describeAdded(o *ours) string {
	if len(o.addedEnv) > 0 {
		return fmt.Sprintf("env %q", o.addedEnv[0].Name)
	}
	return "a volumeMount at " + o.addedRefs[0].MountPath
}

// overlaps reports whether one mount path is the other or holds it.
func overlaps(a, b string) bool {
	a, b = path.Clean("/"+a), path.Clean("/"+b)
	within := func(inner, outer string) bool { return outer == "/" || strings.HasPrefix(inner, outer+"/") }
	return a == b || within(a, b) || within(b, a)
}

// heldCredential describes a credential the injected containers hold of
// their own: a volume that may hold one (any kind but emptyDir, ConfigMap,
// downwardAPI, an image, and their projections) or env from a Secret; ""
// when they hold none. Whether the pod's other containers hold it too is
// not asked: a mount of part of it, or of none (a subPath the Secret
// lacks), would pass for sharing.
func heldCredential(pod *corev1.Pod, list []Content, mounted []string) string {
	for _, name := range mounted {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
		if i >= 0 && !holdsNoCredential(&pod.Spec.Volumes[i]) {
			return fmt.Sprintf("volume %q, which may hold a credential", name)
		}
	}
	for i := range list {
		for _, e := range list[i].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return fmt.Sprintf("env %q from Secret %q", e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		}
		for _, e := range list[i].EnvFrom {
			if e.SecretRef != nil {
				return fmt.Sprintf("envFrom Secret %q", e.SecretRef.Name)
			}
		}
	}
	return ""
}

// holdsNoCredential: the kinds of volume that hold only what a pod creator
// could put in a pod of their own. Any other may hold a credential: a
// Secret, a token, a CSI or storage driver's secretRef, a node agent's
// socket on a hostPath, a claim.
func holdsNoCredential(v *corev1.Volume) bool {
	s := &v.VolumeSource
	switch {
	case ptr.AllPtrFieldsNil(s), // the apiserver makes it an emptyDir
		s.EmptyDir != nil, s.ConfigMap != nil, s.DownwardAPI != nil, s.Image != nil:
		return true
	case s.Projected != nil:
		return !slices.ContainsFunc(s.Projected.Sources, func(p corev1.VolumeProjection) bool {
			return p.ConfigMap == nil && p.DownwardAPI == nil && p.ClusterTrustBundle == nil
		})
	}
	return false
}

// checkOthers: each injected container is still of the kind it was
// injected as, and no init container of the pod's runs before a native
// sidecar and mounts its volumes: it could write what the sidecar reads
// before the sidecar starts. Other init containers may come before (a
// mesh's, a secrets agent's). Where the sidecar holds a credential, no
// container outside the record may reach its volumes or its processes: no
// mount of them but the pod's regular containers' of what the Sidecar
// shares with them (appVolumeMounts), exactly as shared; no process
// namespace shared with the pod or the host.
func checkOthers(pod *corev1.Pod, rec *v1alpha1.InjectionRecord, entries []ownedEntry, mounted, shared []string, credential string, d *drift) {
	for i, name := range rec.Containers {
		at := containerIndex(pod.Spec.InitContainers, name)
		if (at >= 0) != entries[i].init {
			d.add("container %q was moved between initContainers and containers after injection", name)
			continue
		}
		if credential != "" {
			continue // every container is judged below
		}
		for j := range max(at, 0) {
			c := &pod.Spec.InitContainers[j]
			if v := reachedVolume(c, mounted, nil); v != "" && !slices.Contains(rec.Containers, c.Name) {
				d.add("initContainers[%d] %q runs before the sidecar's %q and mounts its volume %q", j, c.Name, name, v)
			}
		}
	}
	if credential == "" {
		return
	}
	s := &pod.Spec
	for _, f := range []struct {
		name string
		set  bool
	}{{"shareProcessNamespace", s.ShareProcessNamespace != nil && *s.ShareProcessNamespace}, {"hostPID", s.HostPID}, {"hostIPC", s.HostIPC}} {
		if f.set {
			d.add("the pod sets %s, so its other containers reach the sidecar's processes and files, and the sidecar holds %s", f.name, credential)
		}
	}
	// An ephemeral container aimed at the sidecar joins its process
	// namespace: /proc/<pid>/root reaches its files.
	for j := range s.EphemeralContainers {
		if c := &s.EphemeralContainers[j]; slices.Contains(rec.Containers, c.TargetContainerName) {
			d.add("ephemeralContainers[%d] %q targets the sidecar's %q, reaching its processes and files, and the sidecar holds %s",
				j, c.Name, c.TargetContainerName, credential)
		}
	}
	for _, group := range []struct {
		field  string
		list   []corev1.Container
		shared []string
	}{{"initContainers", s.InitContainers, nil}, {"containers", s.Containers, shared}, {"ephemeralContainers", ephemeral(pod), nil}} {
		for j := range group.list {
			c := &group.list[j]
			if slices.Contains(rec.Containers, c.Name) {
				continue
			}
			if v := reachedVolume(c, mounted, group.shared); v != "" {
				d.add("%s[%d] %q mounts the sidecar's volume %q as the Sidecar does not share it, and the sidecar holds %s", group.field, j, c.Name, v, credential)
			}
		}
	}
}

// reachedVolume names a volume of mounted that c reaches other than by a
// mount in shared (sharedMount's form); "" when there is none.
func reachedVolume(c *corev1.Container, mounted, shared []string) string {
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if slices.Contains(mounted, m.Name) && !slices.Contains(shared, sharedMount(m)) {
			return m.Name
		}
	}
	for _, dev := range c.VolumeDevices {
		if slices.Contains(mounted, dev.Name) {
			return dev.Name
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FileKeyRef != nil && slices.Contains(mounted, e.ValueFrom.FileKeyRef.VolumeName) {
			return e.ValueFrom.FileKeyRef.VolumeName
		}
	}
	return ""
}

// ephemeral returns the pod's ephemeral containers as containers: they
// mount the pod's volumes as the others do.
func ephemeral(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		out[i] = corev1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
	}
	return out
}

// digestMatches compares what the webhook set with the record's digest,
// applying the apiserver's defaults to list;
// pinned also tolerates an image pinned to a digest after injection
// ("repo:tag" stored as "repo:tag@sha256:…", as Kyverno's verifyImages
// writes it): the same repository and tag.
func digestMatches(list []Content, want string, pinned bool) bool {
	if DigestContents(list) == want { // list is the caller's to change
		return true
	}
	if !pinned || !slices.ContainsFunc(list, func(c Content) bool { return unpinned(c.Image) != c.Image }) {
		return false
	}
	return DigestContents(withoutPins(list)) == want
}

func withoutPins(list []Content) []Content {
	out := slices.Clone(list)
	for i := range out {
		out[i].Image = unpinned(out[i].Image)
	}
	return out
}

// unpinned drops a trailing "@sha256:<64 hex>" from an image that names a
// tag before it: a pin of what the tag named then. An image that was
// already pinned stays as it is.
func unpinned(image string) string {
	const suffix = len("@sha256:") + 64
	if len(image) <= suffix {
		return image
	}
	ref, pin := image[:len(image)-suffix], image[len(image)-suffix:]
	if !strings.HasPrefix(pin, "@sha256:") || strings.Trim(pin[len("@sha256:"):], "0123456789abcdef") != "" || strings.Contains(ref, "@") {
		return image
	}
	if slash := strings.LastIndexByte(ref, '/'); !strings.Contains(ref[slash+1:], ":") {
		return image // no tag: the pin is the only name
	}
	return ref
}

// changedFields names, for each container, the covered fields whose hash
// differs from what owned says the webhook set.
func changedFields(list []Content, entries []ownedEntry, pinned bool) error {
	if pinned {
		list = withoutPins(list)
	}
	var d drift
	for i := range list {
		c := storedContent(list[i])
		got := fieldHashes(&c)
		want, _ := base64.RawURLEncoding.DecodeString(entries[i].fields) // a signed record's decodes
		var names []string
		for g := range fieldGroups {
			if w := locator(want, g); w == nil || string(locator(got, g)) != string(w) {
				names = append(names, fieldGroups[g].name)
			}
		}
		if len(names) > 0 {
			d.add("container %q: %s changed after injection", c.Name, strings.Join(names, ", "))
		}
	}
	if len(d) == 0 {
		d.add("the injected containers differ from what the webhook set")
	}
	return d.err()
}
