package jsonscan

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// The lexing functions work on the document and an index, not on the
// Scanner, so that the hot loops keep everything in registers. Each returns
// the index after what it read, or a *lexError.

type lexError struct {
	at  int
	msg string
}

func errAt(at int, msg string) *lexError { return &lexError{at: at, msg: msg} }

// ws skips whitespace.
func ws(d []byte, i int) int {
	if i < len(d) && d[i] > ' ' { // compact JSON: nothing to skip
		return i
	}
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// skipValue skips the value at d[i:], which may start with whitespace.
// depth is the nesting depth of the value's container.
func skipValue(d []byte, i, depth int) (int, *lexError) {
	i = ws(d, i)
	if i >= len(d) {
		return i, errAt(i, "unexpected end of input")
	}
	switch c := d[i]; c {
	case '"':
		return skipString(d, i)
	case '{', '[':
		return skipContainer(d, i, depth+1)
	case 't':
		return skipLiteral(d, i, "true")
	case 'f':
		return skipLiteral(d, i, "false")
	case 'n':
		return skipLiteral(d, i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return skipNumber(d, i)
		}
		return i, errAt(i, fmt.Sprintf("unexpected character %q", c))
	}
}

func skipContainer(d []byte, i, depth int) (int, *lexError) {
	if depth > MaxDepth {
		return i, errAt(i, "exceeded max depth")
	}
	object := d[i] == '{'
	closing := byte(']')
	if object {
		closing = '}'
	}
	i = ws(d, i+1)
	if i < len(d) && d[i] == closing {
		return i + 1, nil
	}
	var err *lexError
	for {
		if object {
			if i >= len(d) || d[i] != '"' {
				return i, errAt(i, "want a member name")
			}
			if i, err = skipString(d, i); err != nil {
				return i, err
			}
			if i = ws(d, i); i >= len(d) || d[i] != ':' {
				return i, errAt(i, "want ':' after a member name")
			}
			i = ws(d, i+1)
		}
		if i < len(d) && d[i] == '"' {
			i, err = skipString(d, i)
		} else {
			i, err = skipValue(d, i, depth)
		}
		if err != nil {
			return i, err
		}
		if i = ws(d, i); i < len(d) && d[i] == ',' {
			i = ws(d, i+1)
			continue
		}
		if i < len(d) && d[i] == closing {
			return i + 1, nil
		}
		return i, errAt(i, fmt.Sprintf("want ',' or '%c'", closing))
	}
}

func skipLiteral(d []byte, i int, lit string) (int, *lexError) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return i, errAt(i, "invalid literal, want "+lit)
	}
	return i + len(lit), nil
}

func skipNumber(d []byte, i int) (int, *lexError) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return i, errAt(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return j, errAt(j, "invalid number")
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return j, errAt(j, "invalid number")
		}
		i = j
	}
	return i, nil
}

func digits(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// plain marks the ASCII bytes a string may hold as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipString skips the string at d[i]. Bytes from 0x80 up need no check:
// encoding/json accepts invalid UTF-8 too, replacing it.
func skipString(d []byte, i int) (int, *lexError) {
	if j := stringRun(d, i+1, 0); j < len(d) && d[j] == '"' {
		return j + 1, nil
	}
	// An escape, a control character or the end: the long way.
	end, _, _, err := scanString(d, i)
	return end + 1, err
}

// scanString validates the string at d[i] and returns the index of its
// closing quote; escaped reports backslashes, ascii whether all bytes are ASCII.
func scanString(d []byte, i int) (end int, escaped, ascii bool, err *lexError) {
	j := i + 1
	ascii = true
	for {
		if j = stringRun(d, j, highs); j >= len(d) {
			return j, false, false, errAt(j, "unterminated string")
		}
		switch c := d[j]; {
		case c == '"':
			return j, escaped, ascii, nil
		case c == '\\':
			escaped = true
			if j+1 >= len(d) {
				return j, false, false, errAt(j, "unterminated string")
			}
			switch d[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(d) || !isHex4(d[j+2:j+6]) {
					return j, false, false, errAt(j, `invalid \u escape`)
				}
				j += 6
			default:
				return j, false, false, errAt(j, "invalid escape")
			}
		case c < 0x20:
			return j, false, false, errAt(j, "control character in string")
		default:
			ascii = false
			j++
		}
	}
}

const ones, highs = 0x0101010101010101, 0x8080808080808080

// stringRun returns the index of the first byte from j on that is a quote,
// a backslash or a control character, or, when high is highs, not ASCII.
// It looks at eight bytes at a time with the tricks of "Bit Twiddling Hacks":
// the lowest byte each mask flags is the first such byte.
func stringRun(d []byte, j int, high uint64) int {
	for j+8 <= len(d) {
		x := binary.LittleEndian.Uint64(d[j:])
		if m := specialMask(x) | x&high; m != 0 {
			return j + bits.TrailingZeros64(m)>>3
		}
		j += 8
	}
	for j < len(d) && (plain[d[j]] || d[j] >= utf8.RuneSelf && high == 0) {
		j++
	}
	return j
}

// specialMask flags the bytes of x that are a quote, a backslash or below 0x20.
func specialMask(x uint64) uint64 {
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	return hasZero(x^(ones*'"')) | hasZero(x^(ones*'\\')) | (x-ones*0x20) & ^x & highs
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !isHexDigit(c) {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipFast skips the value at d[i] as skipValue does, in one loop and
// without calls for strings and brackets, for what the apiserver sends:
// compact JSON, strings without escapes or control characters, nesting at
// most 64 deep. ok is false at anything else, valid or not; the caller then
// skips the value again with skipValue, which also names any error. It
// accepts nothing that skipValue refuses and ends where it does (FuzzSkip).
func skipFast(d []byte, i, depth int) (end int, ok bool) {
	var objects uint64 // bit k: the container k levels above the innermost is an object
	level := 0
	name := false // a member name comes next
	for {
		if i >= len(d) {
			return i, false
		}
		c := d[i]
		if c == '"' {
			j := i + 1
			for ; j+8 <= len(d); j += 8 {
				if m := specialMask(binary.LittleEndian.Uint64(d[j:])); m != 0 {
					j += bits.TrailingZeros64(m) >> 3
					goto found
				}
			}
			j = stringRun(d, j, 0) // the last bytes
		found:
			if j >= len(d) || d[j] != '"' {
				return j, false
			}
			i = j + 1
			if name {
				if i >= len(d) || d[i] != ':' {
					return i, false
				}
				i++
				name = false
				continue
			}
		} else if name {
			return i, false
		} else if c == '{' || c == '[' {
			if level == 64 || depth+level+1 > MaxDepth {
				return i, false
			}
			level++
			objects <<= 1
			i++
			closing := byte(']')
			if c == '{' {
				objects |= 1
				closing = '}'
			}
			if i >= len(d) || d[i] != closing {
				name = c == '{'
				continue
			}
			i++
			level--
			objects >>= 1
		} else if i, ok = skipScalar(d, i); !ok {
			return i, false
		}
		// After a value: a comma and the next, or the containers it closes.
		for {
			if level == 0 {
				return i, true
			}
			if i >= len(d) {
				return i, false
			}
			object := objects&1 == 1
			if c := d[i]; c == ',' {
				i++
				name = object
				break
			} else if object && c == '}' || !object && c == ']' {
				i++
				level--
				objects >>= 1
				continue
			}
			return i, false
		}
	}
}

// skipScalar skips the number or literal at d[i]; ok is false for anything else.
func skipScalar(d []byte, i int) (int, bool) {
	var err *lexError
	switch c := d[i]; c {
	case 't':
		i, err = skipLiteral(d, i, "true")
	case 'f':
		i, err = skipLiteral(d, i, "false")
	case 'n':
		i, err = skipLiteral(d, i, "null")
	default:
		if c != '-' && (c < '0' || c > '9') {
			return i, false
		}
		i, err = skipNumber(d, i)
	}
	return i, err == nil
}
