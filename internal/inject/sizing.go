package inject

import (
	encjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/inf.v0"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// sizing is a container's spec.resources entry, compiled: what the webhook
// computes of the container's resources for each pod. Resources are not
// part of a record's digest (other admission actors, LimitRanger and VPA,
// set them too), so sizing changes no record's trust.
type sizing struct {
	field string // spec.resources[i], for messages
	// base is the container's own resources, which no entry may repeat.
	base     corev1.ResourceRequirements
	requests []sizedValue
	limits   []sizedValue
	shares   []appShare
}

// sizedValue is a request or limit: a literal quantity, or a template.
type sizedValue struct {
	name    corev1.ResourceName
	literal resource.Quantity
	tmpl    *stringTemplate
}

type appShare struct {
	name     corev1.ResourceName
	percent  int32
	min, max *resource.Quantity
}

// compileSizing compiles spec.resources[i] for a container whose own
// resources are base. declared are the Sidecar's parameters.
func compileSizing(i int, entry *v1alpha1.ContainerResources, base corev1.ResourceRequirements, declared map[string]bool, templates *int) (*sizing, error) {
	field := fmt.Sprintf("spec.resources[%d]", i)
	s := &sizing{field: field, base: base}
	var errs []error
	// The container's own quantities are compared with the others too.
	for kind, list := range map[string]corev1.ResourceList{"requests": base.Requests, "limits": base.Limits} {
		for name, q := range list {
			if err := boundedExponent(q); err != nil {
				errs = append(errs, fmt.Errorf("%s: the container's own %s.%s %w", field, kind, name, err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	values := func(kind string, in map[corev1.ResourceName]string, own corev1.ResourceList) []sizedValue {
		var out []sizedValue
		for _, name := range slices.Sorted(maps.Keys(in)) {
			f := fmt.Sprintf("%s.%s.%s", field, kind, name)
			if _, dup := own[name]; dup {
				errs = append(errs, fmt.Errorf("%s: the container's own resources set %s.%s too; set it in one place", f, kind, name))
				continue
			}
			v := sizedValue{name: name}
			src := in[name]
			if strings.Contains(src, "{{") {
				if err := countTemplate(templates, f); err != nil {
					errs = append(errs, err)
					return out
				}
				t, err := compileStringTemplate(src, declared)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: template %q: %w", f, abbreviate(src), err))
					continue
				}
				v.tmpl = t
			} else {
				q, err := parseQuantity(src)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %q %w", f, abbreviate(src), err))
					continue
				}
				v.literal = q
			}
			out = append(out, v)
		}
		return out
	}
	s.requests = values("requests", entry.Requests, base.Requests)
	s.limits = values("limits", entry.Limits, base.Limits)
	for _, name := range slices.Sorted(maps.Keys(entry.AppShare)) {
		share := entry.AppShare[name]
		f := fmt.Sprintf("%s.appShare.%s", field, name)
		_, own := base.Requests[name]
		switch {
		case own || entry.Requests[name] != "":
			errs = append(errs, fmt.Errorf("%s: requests.%s is set too; a request is set in one place", f, name))
			continue
		case share.Min != nil && boundedExponent(*share.Min) != nil, share.Max != nil && boundedExponent(*share.Max) != nil:
			errs = append(errs, fmt.Errorf("%s: min or max has a decimal exponent beyond ±%d", f, maxQuantityExponent))
			continue
		case share.Min != nil && share.Max != nil && share.Min.Cmp(*share.Max) > 0:
			errs = append(errs, fmt.Errorf("%s: min %s is above max %s", f, share.Min, share.Max))
			continue
		}
		s.shares = append(s.shares, appShare{name: name, percent: share.PercentOfApp, min: share.Min, max: share.Max})
	}
	// Limits below requests, where both are known now.
	literalRequests := s.literals(s.requests, base.Requests)
	for name, limit := range s.literals(s.limits, base.Limits) {
		if req, ok := literalRequests[name]; ok && limit.Cmp(req) < 0 {
			errs = append(errs, fmt.Errorf("%s: limits.%s %s is below requests.%s %s", field, name, limit.String(), name, req.String()))
		}
		for _, sh := range s.shares {
			if sh.name == name && sh.max != nil && sh.max.Cmp(limit) > 0 {
				errs = append(errs, fmt.Errorf("%s.appShare.%s: max %s is above limits.%s %s", field, name, sh.max, name, limit.String()))
			}
		}
	}
	return s, errors.Join(errs...)
}

// literals are the quantities of a list known without a pod: the
// container's own and the literal values.
func (s *sizing) literals(values []sizedValue, own corev1.ResourceList) map[corev1.ResourceName]resource.Quantity {
	out := make(map[corev1.ResourceName]resource.Quantity, len(own)+len(values))
	maps.Copy(out, own)
	for _, v := range values {
		if v.tmpl == nil {
			out[v.name] = v.literal
		}
	}
	return out
}

// templated reports whether a value of it renders from a template.
func (s *sizing) templated() bool {
	return slices.ContainsFunc(slices.Concat(s.requests, s.limits), func(v sizedValue) bool { return v.tmpl != nil })
}

// MaxQuantityLength bounds a quantity's string: the apiserver writes them in
// canonical form, at most 20 digits, a point and a suffix, and parsing
// costs about 10 bytes a byte.
const MaxQuantityLength = 24

// QuantityReadable refuses, unread, a quantity longer than
// MaxQuantityLength or whose decimal exponent has three digits or more.
// Parsing a negative exponent rounds to the nano at a cost of ten to the
// exponent (1e-10000000 took 1.7 s, 1e-99999999 80 s and 414 MiB); in
// canonical form exponents are -9 to 18. "Ei" is a suffix, not an exponent.
func QuantityReadable(s string) error {
	if len(s) > MaxQuantityLength {
		return fmt.Errorf("is %d bytes, longer than any quantity (%d)", len(s), MaxQuantityLength)
	}
	if i := strings.LastIndexAny(s, "eE"); i >= 0 && !strings.HasPrefix(s[i+1:], "i") && len(strings.TrimLeft(s[i+1:], "+-")) > 2 {
		return fmt.Errorf("has a decimal exponent beyond ±%d", maxQuantityExponent)
	}
	return nil
}

// maxParsedExponent is the largest decimal exponent, either way, that
// ReadQuantity hands to resource.ParseQuantity: rounding to the nano costs
// ten to the exponent's distance from -9, a few microseconds at 1,000.
const maxParsedExponent = 1000

// ReadQuantity reads s as resource.ParseQuantity does, to the same value,
// format and error, in work bounded by its length whatever its exponent.
// ParseQuantity rounds to the nano at a cost of ten to the distance of the
// exponent from -9 (1e-99999999 took 80 s and 414 MiB, and a mantissa of 19
// digits or more with a large positive exponent as long). The apiserver
// stores the quantities it accepts in canonical form, with exponents from -9
// up, and 1e200 is "100e198": a pod holding one is judged, not refused.
// Past ±maxParsedExponent the value is made without the rounding: a
// positive exponent only scales it, a negative one leaves ±1n or 0.
func ReadQuantity(s string) (resource.Quantity, error) {
	value, digits, exponent, ok := decimalExponent(s)
	switch {
	case !ok, exponent >= -maxParsedExponent && exponent <= maxParsedExponent,
		exponent > 0 && digits <= 18: // ParseQuantity's int64 form: no rounding
		return resource.ParseQuantity(s)
	}
	amount, parsed := new(inf.Dec).SetString(value)
	if !parsed {
		return resource.Quantity{}, resource.ErrNumeric
	}
	if exponent < 0 && amount.Sign() != 0 && int64(len(value))+int64(exponent) > -10 {
		return resource.ParseQuantity(s) // a mantissa as long as the exponent: its cost is its length's
	}
	switch {
	case amount.Sign() == 0:
		return resource.Quantity{Format: resource.DecimalExponent}, nil
	case exponent > 0:
		amount.SetScale(amount.Scale() - inf.Scale(exponent))
		return *resource.NewDecimalQuantity(*amount, resource.DecimalExponent), nil
	default: // |value| < 1n, rounded up away from zero
		q := resource.NewScaledQuantity(int64(amount.Sign()), resource.Nano)
		q.Format = resource.DecimalExponent
		return *q, nil
	}
}

// decimalExponent splits a quantity written as a number and a decimal
// exponent ("1.5e-3") as resource.ParseQuantity reads it: the number, its
// count of digits as ParseQuantity counts them (leading zeros left out, so
// that "0000000000000000001e1002" takes its int64 form, which keeps the
// string as written), and the exponent, which ParseQuantity truncates to 32
// bits; ok is false for any other form.
func decimalExponent(s string) (value string, digits int, exponent int32, ok bool) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	dot, leading := false, true
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == '0' && leading && !dot:
		case c >= '0' && c <= '9':
			digits++
			leading = false
		case c == '.' && !dot:
			dot = true
		default:
			goto number
		}
	}
number:
	if i+1 >= len(s) || (s[i] != 'e' && s[i] != 'E') {
		return "", 0, 0, false
	}
	e, err := strconv.ParseInt(s[i+1:], 10, 64) // as ParseQuantity reads it: a sign may lead
	if err != nil {
		return "", 0, 0, false
	}
	return s[:i], digits, int32(e), true //nolint:gosec // ParseQuantity truncates the same way
}

// parseQuantity reads a quantity as the apiserver would, refusing the
// negative ones it refuses in a container, and exponents past bounds.
func parseQuantity(s string) (resource.Quantity, error) {
	if err := QuantityReadable(s); err != nil {
		return resource.Quantity{}, err
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, errors.New("is not a quantity (such as 250m, 2 or 128Mi)")
	}
	if err := boundedExponent(q); err != nil {
		return q, err
	}
	if q.Sign() < 0 {
		return q, errors.New("is negative")
	}
	return q, nil
}

// maxQuantityExponent bounds the decimal exponent of the quantities the
// webhook adds and compares: both rescale to a common exponent, at a cost
// of ten to the difference (1e100000000 against 1 took minutes), though
// parsing costs microseconds. 10^±30 is past any size a node has.
const maxQuantityExponent = 30

func boundedExponent(q resource.Quantity) error {
	if scale := q.AsDec().Scale(); scale > maxQuantityExponent || scale < -maxQuantityExponent {
		return fmt.Errorf("has a decimal exponent beyond ±%d", maxQuantityExponent)
	}
	return nil
}

// size computes the resources of each sized container of the selection
// for this pod, into sel.render.sizes; false when it denied the pod.
func (p *plan) size(sel *selection) bool {
	sc := sel.sc
	for _, list := range [2][]renderedContainer{sc.initContainers, sc.containers} {
		for _, rc := range list {
			if rc.sizing == nil {
				continue
			}
			raw, err := p.sizeContainer(sel, rc)
			if err != nil {
				p.deny(sc.name, fmt.Sprintf("sidecar %q: %v", sc.name, err))
				return false
			}
			sel.render.sizes = append(sel.render.sizes, raw)
		}
	}
	return true
}

func (p *plan) sizeContainer(sel *selection, rc renderedContainer) ([]byte, error) {
	s := rc.sizing
	requests, limits := maps.Clone(s.base.Requests), maps.Clone(s.base.Limits)
	// origins says where the templated values came from, by "kind.name".
	var origins map[string]string
	for _, kind := range [...]struct {
		name   string
		values []sizedValue
		into   *corev1.ResourceList
	}{{"requests", s.requests, &requests}, {"limits", s.limits, &limits}} {
		for _, v := range kind.values {
			q, err := p.sizedValue(sel, v)
			if err != nil {
				return nil, fmt.Errorf("%s.%s.%s (container %q): %w", s.field, kind.name, v.name, rc.name, err)
			}
			if *kind.into == nil {
				*kind.into = corev1.ResourceList{}
			}
			(*kind.into)[v.name] = q
			if v.tmpl == nil {
				continue
			}
			if origins == nil {
				origins = map[string]string{}
			}
			key := fmt.Sprintf("%s.%s", kind.name, v.name)
			origins[key] = ", from " + p.origins(sel, v.tmpl)
			if p.trace != nil {
				p.trace.note(sel.sc.name, fmt.Sprintf("container %s: %s = %s%s", rc.name, key, q.String(), origins[key]))
			}
		}
	}
	for _, sh := range s.shares {
		q, note, err := p.share(sh)
		if err != nil {
			return nil, fmt.Errorf("%s.appShare.%s (container %q): %w", s.field, sh.name, rc.name, err)
		}
		if p.trace != nil {
			p.trace.note(sel.sc.name, fmt.Sprintf("container %s: requests.%s = %s", rc.name, sh.name, note))
		}
		if q.IsZero() {
			continue
		}
		if requests == nil {
			requests = corev1.ResourceList{}
		}
		requests[sh.name] = q
	}
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		limit := limits[name]
		if req, ok := requests[name]; ok && limit.Cmp(req) < 0 {
			return nil, fmt.Errorf("%s (container %q): limits.%s %s%s is below requests.%s %s%s", s.field, rc.name,
				name, limit.String(), origins["limits."+string(name)], name, req.String(), origins["requests."+string(name)])
		}
	}
	return encjson.Marshal(corev1.ResourceRequirements{Requests: requests, Limits: limits, Claims: s.base.Claims})
}

// sizedValue renders one request or limit and reads it as a quantity.
func (p *plan) sizedValue(sel *selection, v sizedValue) (resource.Quantity, error) {
	if v.tmpl == nil {
		return v.literal, nil
	}
	rendered, err := v.tmpl.render(&sel.render)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("rendering: %w", err)
	}
	q, err := parseQuantity(rendered)
	if err != nil {
		return q, fmt.Errorf("%q, from %s, %w", abbreviate(rendered), p.origins(sel, v.tmpl), err)
	}
	return q, nil
}

// origins names where the parameters a template reads came from.
func (p *plan) origins(sel *selection, t *stringTemplate) string {
	if len(t.params) == 0 {
		return "the pod's fields"
	}
	names := make([]string, len(t.params))
	for i, name := range t.params {
		at := sel.sc.paramIndex[name]
		names[i] = paramOrigin(&sel.sc.params[at], sel.render.params[at].source, p.namespace)
	}
	return strings.Join(names, " and ")
}

// share computes a request as a share of the app's requests of the same
// resource, clamped, and says how.
func (p *plan) share(sh appShare) (resource.Quantity, string, error) {
	spec, err := p.podSpec()
	if err != nil {
		return resource.Quantity{}, "", fmt.Errorf("reading the pod's containers: %w", err)
	}
	var sum resource.Quantity
	terms := make([]string, 0, len(spec.Containers))
	for i := range spec.Containers {
		if q, ok := spec.Containers[i].Resources.Requests[sh.name]; ok {
			if err := boundedExponent(q); err != nil {
				return resource.Quantity{}, "", fmt.Errorf("container %q: requests.%s %w", spec.Containers[i].Name, sh.name, err)
			}
			sum.Add(q)
			terms = append(terms, fmt.Sprintf("%s %s", spec.Containers[i].Name, q.String()))
		}
	}
	// Whole units, but a CPU's thousandths: the apiserver rounds a
	// quantity up to the milli, and bytes are whole.
	scale := inf.Scale(0)
	if sh.name == corev1.ResourceCPU {
		scale = 3
	}
	product := new(inf.Dec).Mul(sum.AsDec(), inf.NewDec(int64(sh.percent), 0))
	format := sum.Format
	if format == "" {
		format = resource.DecimalSI
	}
	// Binary quantities (memory) round up to whole Ki, so they print as such.
	unit := int64(100)
	if format == resource.BinarySI {
		unit *= 1024
	}
	dec := new(inf.Dec).QuoRound(product, inf.NewDec(unit, 0), scale, inf.RoundUp)
	if format == resource.BinarySI {
		dec.Mul(dec, inf.NewDec(1024, 0))
	}
	q := *resource.NewDecimalQuantity(*dec, format)
	app := "nothing"
	if len(terms) > 0 {
		app = fmt.Sprintf("%s (%s)", sum.String(), strings.Join(terms, ", "))
	}
	note := fmt.Sprintf("%d%% of the app's requests.%s, %s, = %s", sh.percent, sh.name, app, q.String())
	switch {
	case sh.min != nil && q.Cmp(*sh.min) < 0:
		q = sh.min.DeepCopy()
		note += ", raised to min " + q.String()
	case sh.max != nil && q.Cmp(*sh.max) > 0:
		q = sh.max.DeepCopy()
		note += ", lowered to max " + q.String()
	}
	if q.IsZero() {
		note += ": left unset"
	}
	return q, note, nil
}
