package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

// Counts are what of a JSON document costs memory once decoded.
type Counts struct {
	// Containers are objects and arrays.
	Containers int
	// Scalars are strings (member names too), numbers, true, false and null.
	Scalars int
	// NonASCII are the bytes from 0x80 up: encoding/json turns each byte of
	// invalid UTF-8 into U+FFFD, 3 bytes.
	NonASCII int
	// FirstNullElement is the offset of the first null that is an array's
	// element, -1 for none: a decoder makes each a whole zero element.
	FirstNullElement int
	// LongStringBytes are the bytes, quotes included, of the strings of
	// more than LongString bytes: parsing one as a number (a quantity)
	// costs about ten bytes a byte.
	LongStringBytes int
	// LongStringSquares is the sum of the squares of their lengths: parsing
	// a long number (a quantity's mantissa) costs the square of its length.
	LongStringSquares int64
}

// LongString is the length, quotes included, past which a string counts
// in LongStringBytes.
const LongString = 64

// Byte classes outside strings.
const (
	classScalar byte = iota // starts a number or literal, or continues one
	classQuote
	classOpen
	classClose
	classSeparator
	classSpace
)

var classes = func() (c [256]byte) {
	c['"'] = classQuote
	c['{'], c['['] = classOpen, classOpen
	c['}'], c[']'] = classClose, classClose
	c[','], c[':'] = classSeparator, classSeparator
	c[' '], c['\t'], c['\n'], c['\r'] = classSpace, classSpace, classSpace, classSpace
	return c
}()

// Count counts a document's tokens without validating it: what decoding it
// into Go values costs depends on them far more than on its length
// ("[{},{},…]" is 3 bytes a struct). It is exact for valid JSON; for any
// other input it stops where a string does not end.
func Count(d []byte) Counts {
	c := Counts{NonASCII: nonASCII(d), FirstNullElement: -1}
	afterValue := false // the last token ended a value: a digit or letter now is inside it
	// In valid JSON a value after '[' or ',' is an array's element: after a
	// ',' in an object comes a member name.
	element := false
	for i := 0; i < len(d); i++ {
		switch classes[d[i]] {
		case classQuote:
			end, err := skipString(d, i)
			if err != nil {
				return c
			}
			c.Scalars++
			if n := end - i; n > LongString {
				c.LongStringBytes += n
				c.LongStringSquares += int64(n) * int64(n)
			}
			i, afterValue, element = end-1, true, false
		case classOpen:
			c.Containers++
			afterValue, element = false, d[i] == '['
		case classClose:
			afterValue, element = true, false
		case classSeparator:
			afterValue, element = false, d[i] == ','
		case classScalar:
			if !afterValue {
				c.Scalars++
				afterValue = true
				if element && d[i] == 'n' && c.FirstNullElement < 0 {
					c.FirstNullElement = i
				}
				element = false
			}
		}
	}
	return c
}

// nonASCII counts the bytes from 0x80 up, eight at a time.
func nonASCII(d []byte) int {
	n, i := 0, 0
	for ; i+8 <= len(d); i += 8 {
		n += bits.OnesCount64(binary.LittleEndian.Uint64(d[i:]) & highs)
	}
	for ; i < len(d); i++ {
		if d[i] >= 0x80 {
			n++
		}
	}
	return n
}
