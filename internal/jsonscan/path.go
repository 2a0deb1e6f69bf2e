package jsonscan

import (
	"strconv"
	"strings"
)

// PathAt names the value that starts at offset in a valid document, for
// example `spec.containers[2].name` or `metadata.labels["app.kubernetes.io/name"]`.
// It is for error messages, so it rescans rather than slowing the hot path.
func PathAt(data []byte, offset int) string {
	s := Scanner{data: data}
	var segments []string
	s.find(offset, &segments)
	return strings.TrimPrefix(strings.Join(segments, ""), ".")
}

// find walks the value at s.pos and reports whether the value at offset is
// in it, leaving segments as the path to that value.
func (s *Scanner) find(offset int, segments *[]string) bool {
	c := s.peek()
	if s.pos >= offset {
		return s.pos == offset
	}
	n := len(*segments)
	switch c {
	case '{':
		s.Object()
		for key, ok := s.Member(); ok; key, ok = s.Member() {
			*segments = append((*segments)[:n], keySegment(string(key)))
			if s.find(offset, segments) {
				return true
			}
		}
	case '[':
		s.Array()
		for i := 0; s.Element(); i++ {
			*segments = append((*segments)[:n], "["+strconv.Itoa(i)+"]")
			if s.find(offset, segments) {
				return true
			}
		}
	default:
		s.Skip()
	}
	*segments = (*segments)[:n]
	return false
}

func keySegment(key string) string {
	for _, r := range key {
		if !isPlainKeyRune(r) {
			return "[" + strconv.Quote(key) + "]"
		}
	}
	if key == "" {
		return `[""]`
	}
	return "." + key
}

// isPlainKeyRune reports whether r may stand in a key written as .key.
func isPlainKeyRune(r rune) bool {
	return r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}
