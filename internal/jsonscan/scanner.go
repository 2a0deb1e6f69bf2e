// Package jsonscan reads chosen fields out of a JSON document without
// decoding the rest. It validates everything it passes over as strictly as
// encoding/json, which the apiserver uses, and allocates only for the values
// the caller asks for. The admission hot path uses it to read a pod's names,
// labels and annotations out of a review of several kilobytes, and its
// lexer to quote the strings it writes back (AppendQuote).
package jsonscan

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting accepted, the same as encoding/json's.
const MaxDepth = 10000

// SyntaxError is input that is not JSON.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.Offset, e.Msg)
}

// TypeError is valid JSON whose value at Path has the wrong type.
type TypeError struct {
	Offset int
	// Path locates the value, for example "request.object.metadata.labels".
	Path string
	Want string
	Got  string
}

func (e *TypeError) Error() string {
	path := e.Path
	if path == "" {
		path = "the document"
	}
	return fmt.Sprintf("%s: want %s, got %s", path, e.Want, e.Got)
}

// Scanner reads one JSON document front to back. Callers walk it with
// Object/Member, Array/Element and the value readers; every value must be
// read or skipped before the next member or element is asked for. The first
// error sticks: afterwards every call returns a zero value, so loops end.
type Scanner struct {
	data    []byte
	pos     int
	depth   int
	first   bool // the next Member or Element is the first of its container
	err     error
	scratch []byte
	arena   []byte // backs the strings returned; see intern
	budget  Budget
	costs   Costs
	left    int64 // bytes granted by budget and not yet spent
}

// Budget prices what a reader keeps of a document while it reads it, so
// that a document that costs far more decoded than its size is stopped
// partway, in the one pass, not priced by a pass before.
type Budget interface {
	// Take is asked for at least n more bytes when those granted are spent,
	// and returns how many it grants; its error stops the scanner.
	Take(n int64) (granted int64, err error)
}

// Costs are what a reader keeps for each part of the document it reads:
// PerOpen for each object or array it enters, PerValue for each member or
// element, on top of twice the bytes of each string it is returned (the
// arena they are copied into grows by doubling). What is skipped costs
// nothing: nothing of it is kept.
type Costs struct {
	PerOpen, PerValue int64
}

// Bound charges what the reader keeps from now on to b.
func (s *Scanner) Bound(b Budget, c Costs) { s.budget, s.costs, s.left = b, c, 0 }

// charge spends n bytes of the budget, asking it for more when they run
// out; small enough to be inlined where the reader charges each value.
func (s *Scanner) charge(n int64) {
	if s.left -= n; s.left < 0 {
		s.take()
	}
}

// take asks the budget for what charge overspent. Without a budget, there is
// nothing to spend.
func (s *Scanner) take() {
	switch {
	case s.err != nil:
	case s.budget == nil:
		s.left = math.MaxInt64 / 2
	default:
		granted, err := s.budget.Take(-s.left)
		if err != nil {
			s.err = err
			return
		}
		s.left += granted
	}
}

// Reset starts reading data. The scratch buffer is reused; the strings
// already returned stay valid.
func (s *Scanner) Reset(data []byte) {
	*s = Scanner{data: data, scratch: s.scratch[:0]}
}

// Err returns the first error, if any.
func (s *Scanner) Err() error { return s.err }

// Offset is the position of the next unread byte.
func (s *Scanner) Offset() int { return s.pos }

// Bytes returns the document's bytes from start to end, for example around
// a value read with Offset before and after it.
func (s *Scanner) Bytes(start, end int) []byte { return s.data[start:end] }

// End checks that nothing but whitespace follows the document.
func (s *Scanner) End() {
	if s.peek(); s.err == nil && s.pos < len(s.data) {
		s.syntax("unexpected data after the top-level value")
	}
}

// Null consumes a null and reports whether there was one.
func (s *Scanner) Null() bool {
	if s.peek() != 'n' {
		return false
	}
	s.literal("null")
	return s.err == nil
}

// Object starts reading an object. It returns false for null, which it
// consumes, and on error.
func (s *Scanner) Object() bool {
	return s.open('{', "object")
}

// Array starts reading an array. It returns false for null, which it
// consumes, and on error.
func (s *Scanner) Array() bool {
	return s.open('[', "array")
}

func (s *Scanner) open(c byte, want string) bool {
	switch s.peek() {
	case c:
	case 'n':
		s.literal("null")
		return false
	default:
		s.mismatch(want)
		return false
	}
	s.pos++
	if s.depth++; s.depth > MaxDepth {
		s.syntax("exceeded max depth")
		return false
	}
	s.first = true
	if s.budget != nil {
		s.charge(s.costs.PerOpen)
	}
	return s.err == nil
}

// Member returns the next member's name, unescaped, and positions the
// scanner on its value. It returns false at the end of the object. The name
// is valid until the next call.
func (s *Scanner) Member() ([]byte, bool) {
	if !s.next('}') {
		return nil, false
	}
	// Fast path for the usual name: short, plain ASCII, a colon right after.
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '"' {
		j := stringRun(d, i+1, highs)
		if j+1 < len(d) && d[j] == '"' && d[j+1] == ':' {
			s.pos = j + 2
			return d[i+1 : j], true
		}
	}
	if s.peek() != '"' {
		s.syntax("want a member name")
		return nil, false
	}
	key := s.string()
	if s.peek() != ':' {
		s.syntax("want ':' after a member name")
		return nil, false
	}
	s.pos++
	return key, s.err == nil
}

// MemberName is Member with the name as a string, allocated like String's values.
func (s *Scanner) MemberName() (string, bool) {
	key, ok := s.Member()
	return s.intern(key), ok
}

// Element positions the scanner on the next element; false at the end of the array.
func (s *Scanner) Element() bool {
	return s.next(']')
}

// next consumes the separator before a member or element, or the closing byte.
func (s *Scanner) next(closing byte) bool {
	if s.err != nil {
		return false
	}
	c := s.peek()
	if c == closing {
		s.pos++
		s.depth--
		s.first = false
		return false
	}
	if s.first {
		s.first = false
		if c == 0 {
			s.syntax("unexpected end of input")
			return false
		}
	} else {
		if c != ',' {
			s.syntax(fmt.Sprintf("want ',' or '%c'", closing))
			return false
		}
		s.pos++
	}
	if s.budget != nil {
		s.charge(s.costs.PerValue)
	}
	return s.err == nil
}

// String reads a string value; ok is false for null and on error.
func (s *Scanner) String() (value string, ok bool) {
	// Fast path for the usual value: plain ASCII.
	if d, i := s.data, s.pos; s.err == nil && i < len(d) && d[i] == '"' {
		if j := stringRun(d, i+1, highs); j < len(d) && d[j] == '"' {
			s.pos = j + 1
			return s.intern(d[i+1 : j]), s.err == nil
		}
	}
	switch s.peek() {
	case '"':
		b := s.string()
		return s.intern(b), s.err == nil
	case 'n':
		s.literal("null")
	default:
		s.mismatch("string")
	}
	return "", false
}

// arenaChunk is the first arena's size, and the longest string put in one.
const arenaChunk = 1024

// intern copies b into an append-only arena and returns it as a string, so
// that reading many short strings costs a few allocations, not one each.
// Bytes handed out are never written again; Reset starts a new arena.
func (s *Scanner) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s.charge(2 * int64(len(b))) // the arena grows by doubling
	if s.err != nil {
		return ""
	}
	if len(b) > arenaChunk {
		// On its own: in the arena it would double the arenas after it.
		return string(b)
	}
	if cap(s.arena)-len(s.arena) < len(b) {
		s.arena = make([]byte, 0, max(arenaChunk, 2*cap(s.arena)))
	}
	start := len(s.arena)
	s.arena = append(s.arena, b...)
	return unsafe.String(&s.arena[start], len(b))
}

// Bool reads a boolean; ok is false for null.
func (s *Scanner) Bool() (value, ok bool) {
	switch s.peek() {
	case 't':
		s.literal("true")
		return true, s.err == nil
	case 'f':
		s.literal("false")
		return false, s.err == nil
	case 'n':
		s.literal("null")
	default:
		s.mismatch("boolean")
	}
	return false, false
}

// Raw skips a value and returns its bytes.
func (s *Scanner) Raw() []byte {
	s.peek()
	start := s.pos
	s.Skip()
	if s.err != nil {
		return nil
	}
	return s.data[start:s.pos]
}

// Skip passes over one value, validating it.
func (s *Scanner) Skip() {
	if s.err != nil {
		return
	}
	if end, ok := skipFast(s.data, s.pos, s.depth); ok {
		s.pos = end
		return
	}
	s.advance(skipValue(s.data, s.pos, s.depth))
}

// Peek returns the first byte of the next value without reading it: '{',
// '[', '"', 't', 'f', 'n', '-' or a digit; 0 at the end or after an error.
func (s *Scanner) Peek() byte { return s.peek() }

// peek skips whitespace and returns the next byte, 0 at the end or on error.
func (s *Scanner) peek() byte {
	if s.err != nil {
		return 0
	}
	if s.pos = ws(s.data, s.pos); s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *Scanner) literal(lit string) {
	s.advance(skipLiteral(s.data, s.pos, lit))
}

// advance moves past what a lexing function read, or records its error.
func (s *Scanner) advance(pos int, err *lexError) {
	if err != nil {
		s.pos = err.at
		s.syntax(err.msg)
		return
	}
	s.pos = pos
}

// string reads the string at s.pos and returns its value as encoding/json
// would decode it. Plain strings alias the input; others use the scratch buffer.
func (s *Scanner) string() []byte {
	end, escaped, ascii, err := scanString(s.data, s.pos)
	if err != nil {
		s.advance(0, err)
		return nil
	}
	raw := s.data[s.pos+1 : end]
	s.pos = end + 1
	if !escaped && (ascii || utf8.Valid(raw)) {
		return raw
	}
	// Invalid UTF-8 decodes to U+FFFD, 3 bytes a byte. A bigger buffer is a
	// new one, charged whole: strings a byte longer each would otherwise
	// allocate their length each for a charge of 3 bytes. Doubling keeps
	// their sum within twice the longest.
	if need := 3 * len(raw); need > cap(s.scratch) {
		size := max(need, 2*cap(s.scratch))
		if s.charge(int64(size)); s.err != nil {
			return nil
		}
		// make, as slices.Grow allocates twice under the race detector.
		s.scratch = make([]byte, 0, size)
	}
	s.scratch = unquote(s.scratch[:0], raw)
	return s.scratch
}

// unquote decodes a validated string body, replacing invalid UTF-8 and lone
// surrogates with U+FFFD as encoding/json does.
func unquote(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch raw[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2 : i+6])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if pair := utf16.DecodeRune(r, hex4(raw[i+2:i+6])); pair != utf8.RuneError {
							dst = utf8.AppendRune(dst, pair)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, raw[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, raw[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

func hex4(b []byte) rune {
	v, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(v)
}

func (s *Scanner) syntax(msg string) {
	if s.err == nil {
		s.err = &SyntaxError{Offset: s.pos, Msg: msg}
	}
}

// mismatch records a TypeError for the value at s.pos, or a SyntaxError when
// what is there is not a valid value either.
func (s *Scanner) mismatch(want string) {
	if s.err != nil {
		return
	}
	at := s.pos
	got := kindAt(s.data, at)
	if got == "" {
		s.syntax("want " + want)
		return
	}
	// Report a type error only for a document that is otherwise valid JSON.
	probe := Scanner{data: s.data}
	probe.Skip()
	probe.End()
	if probe.err != nil {
		s.err = probe.err
		return
	}
	s.err = &TypeError{Offset: at, Path: PathAt(s.data, at), Want: want, Got: got}
}

func kindAt(d []byte, i int) string {
	if i >= len(d) {
		return ""
	}
	switch c := d[i]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	}
	return ""
}
