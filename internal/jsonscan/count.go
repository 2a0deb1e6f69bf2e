package jsonscan

// Counts are the tokens of a JSON document that cost memory once decoded.
type Counts struct {
	// Containers are objects and arrays.
	Containers int
	// Scalars are strings (member names too), numbers, true, false and null.
	Scalars int
}

// Count counts a document's tokens without validating it: what decoding it
// into Go values costs depends on them far more than on its length
// ("[{},{},…]" is 3 bytes a struct). It is exact for valid JSON; for any
// other input it stops where a string does not end.
func Count(d []byte) Counts {
	var c Counts
	afterValue := false // the last token ended a value: a digit or letter now is inside it
	for i := 0; i < len(d); {
		switch d[i] {
		case '"':
			end, err := skipString(d, i)
			if err != nil {
				return c
			}
			c.Scalars++
			i, afterValue = end, true
			continue
		case '{', '[':
			c.Containers++
			afterValue = false
		case '}', ']':
			afterValue = true
		case ',', ':':
			afterValue = false
		case ' ', '\t', '\n', '\r':
		default: // a number or literal begins where no value has just ended
			if !afterValue {
				c.Scalars++
				afterValue = true
			}
		}
		i++
	}
	return c
}
