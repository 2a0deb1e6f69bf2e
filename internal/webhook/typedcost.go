package webhook

import (
	encjson "encoding/json"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sidecar-operator/sidecar-operator/internal/jsonscan"
)

// typedFrom is the count's price (countedCost) from which an object is
// priced again by its Go types: a few hundred env entries or volumes, which
// the count prices as containers.
const typedFrom = 4 << 20

// typedCost prices decoding data into a value of type t (counted.decode) by
// the Go value each part of it decodes into, where countedCost prices every
// object as a container: a pod of 20,000 env entries, 40 bytes each
// decoded, was priced 90 MiB by its count and refused, though the apiserver
// accepts it. Like countedCost it is at least what decoding allocates
// (TestValidatingDrawsWhatItDecodes holds it to the runtime's count):
//   - twice the bytes of data, with each byte of invalid UTF-8 three, for the
//     strings;
//   - each pointer's target, rounded up to the allocator's size class;
//   - each slice 7 times its elements' size: reflect.Value.Grow, as json v2
//     grows them, adds a quarter at a time past 256 elements, so that what
//     it allocates on the way is 5 times the final capacity;
//   - each map 4 times its entries, for its groups and their doubling;
//   - 16 bytes a scalar, for a string's rounding;
//   - a value with a decoder of its own (a quantity, a time) 512 bytes, 16
//     a byte and the square of its length over 256, what parsing a long
//     quantity costs;
//   - a member no field takes, and an interface, as countedCost prices them.
//
// It reads the document once with jsonscan, without keeping any of it.
func typedCost(data []byte, t reflect.Type) (int64, error) {
	p := typedPricer{cost: 2*int64(len(data)+2*jsonscan.Count(data).NonASCII) + allocSize(t.Size())}
	p.s.Reset(data)
	p.value(t)
	p.s.End()
	return p.cost, p.s.Err()
}

type typedPricer struct {
	s    jsonscan.Scanner
	cost int64
}

const (
	typedPerScalar    = 16
	typedPerDecoder   = 512
	typedDecoderBytes = 16
	typedSliceFactor  = 7
	typedMapFactor    = 4
	typedMapOverhead  = 256
)

var (
	quantityType      = reflect.TypeFor[resource.Quantity]()
	managedFieldsType = reflect.TypeFor[[]metav1.ManagedFieldsEntry]()
	unmarshalerType   = reflect.TypeFor[encjson.Unmarshaler]()
)

// value prices the next value, decoded into a t.
func (p *typedPricer) value(t reflect.Type) {
	s := &p.s
	if s.Peek() == 'n' { // null leaves the zero value, allocating nothing
		s.Skip()
		return
	}
	switch {
	case t == managedFieldsType: // skipped unread (decodeOptions)
		s.Skip()
		return
	case t == quantityType || decodesItself(t):
		n := int64(len(s.Raw()))
		p.cost += typedPerDecoder + typedDecoderBytes*n + n*n/costLongStringSquare
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p.cost += allocSize(t.Elem().Size())
		p.value(t.Elem())
	case reflect.Struct:
		if s.Peek() != '{' {
			s.Skip() // a type error, where decoding stops
			return
		}
		fields := fieldsOf(t)
		s.Object()
		for key, ok := s.Member(); ok; key, ok = s.Member() {
			if ft, known := fields[string(key)]; known {
				p.value(ft)
			} else {
				p.cost += decodeCost(s.Raw())
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // base64
			p.cost += allocSize(uintptr(len(s.Raw())))
			return
		}
		if s.Peek() != '[' {
			s.Skip()
			return
		}
		n := int64(0)
		s.Array()
		for s.Element() {
			n++
			p.value(t.Elem())
		}
		p.cost += typedSliceFactor * n * int64(t.Elem().Size())
	case reflect.Array:
		if s.Peek() != '[' {
			s.Skip()
			return
		}
		s.Array()
		for s.Element() {
			p.value(t.Elem())
		}
	case reflect.Map:
		if s.Peek() != '{' {
			s.Skip()
			return
		}
		n := int64(0)
		s.Object()
		for _, ok := s.Member(); ok; _, ok = s.Member() {
			n++
			p.cost += typedPerScalar // the key's string
			p.value(t.Elem())
		}
		p.cost += typedMapOverhead + typedMapFactor*n*int64(t.Key().Size()+t.Elem().Size()+8)
	case reflect.Interface:
		p.cost += decodeCost(s.Raw())
	default: // strings, numbers and booleans
		s.Skip()
		p.cost += typedPerScalar
	}
}

// allocSize is at least what the allocator takes for n bytes: its size
// classes round up by at most a quarter past 16 bytes.
func allocSize(n uintptr) int64 { return int64(n) + int64(n)/4 + 16 }

// decoders are the types with a decoder of their own, by type.
var decoders sync.Map // reflect.Type -> bool

func decodesItself(t reflect.Type) bool {
	if d, ok := decoders.Load(t); ok {
		return d.(bool)
	}
	d := reflect.PointerTo(t).Implements(unmarshalerType)
	decoders.Store(t, d)
	return d
}

// fieldTypes are the types of the fields of struct types by the member
// names json v2 decodes into them, embedded structs' fields included.
var fieldTypes sync.Map // reflect.Type -> map[string]reflect.Type

func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldTypes.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	addFields(fields, t)
	fieldTypes.Store(t, fields)
	return fields
}

// addFields adds t's fields to fields. A name json v2 would not decode
// into (an unexported field, say) only prices a member as a field, at
// most what countedCost prices it; a field missed would price a member as
// the count does, which is more.
func addFields(fields map[string]reflect.Type, t reflect.Type) {
	for sf := range t.Fields() {
		tag, hasTag := sf.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		name, options, _ := strings.Cut(tag, ",")
		ft := sf.Type
		// An embedded pointer is not flattened: its members are priced as
		// the count prices them, the target's allocation with them.
		if ((sf.Anonymous && name == "") || strings.Contains(options, "inline")) && ft.Kind() == reflect.Struct {
			addFields(fields, ft)
			continue
		}
		if !hasTag || name == "" {
			name = sf.Name
		}
		if _, taken := fields[name]; !taken {
			fields[name] = sf.Type
		}
	}
}
