package jsonscan

import (
	"slices"
	"strconv"
	"strings"
)

// What PathAt names at most: a hostile document's path is as deep and its
// keys as long as the document allows, and the path goes into an answer.
const (
	maxPathDepth  = 32
	maxKeyInPath  = 64
	maxPathLength = 256
)

// PathAt names the value that starts at offset in a valid document, for
// example `spec.containers[2].name` or `metadata.labels["app.kubernetes.io/name"]`.
// It is for error messages, so it rescans rather than slowing the hot path;
// it keeps nothing of what it passes, and names at most maxPathDepth levels
// and maxPathLength bytes.
func PathAt(data []byte, offset int) string {
	s := Scanner{data: data}
	var segments []string // innermost first
	s.find(offset, 0, &segments)
	slices.Reverse(segments)
	path := strings.TrimPrefix(strings.Join(segments, ""), ".")
	if len(path) > maxPathLength {
		path = path[:maxPathLength] + "…"
	}
	return path
}

// find walks the value at s.pos and reports whether the value at offset is
// in it, appending the path to that value, innermost segment first, on the
// way back out.
func (s *Scanner) find(offset, depth int, segments *[]string) bool {
	c := s.peek()
	if s.pos >= offset {
		return s.pos == offset
	}
	switch c {
	case '{':
		s.Object()
		for at := s.pos; ; at = s.pos {
			if _, ok := s.Member(); !ok {
				break
			}
			if s.find(offset, depth+1, segments) {
				s.segment(depth, segments, func() string { return keySegment(s.keyAt(at)) })
				return true
			}
		}
	case '[':
		s.Array()
		for i := 0; s.Element(); i++ {
			if s.find(offset, depth+1, segments) {
				s.segment(depth, segments, func() string { return "[" + strconv.Itoa(i) + "]" })
				return true
			}
		}
	default:
		s.Skip()
	}
	return false
}

// segment appends the segment of a level the path goes through, for the
// outermost maxPathDepth levels, and "…" for the ones below.
func (s *Scanner) segment(depth int, segments *[]string, name func() string) {
	switch {
	case depth < maxPathDepth:
		*segments = append(*segments, name())
	case depth == maxPathDepth:
		*segments = append(*segments, "…")
	}
}

// keyAt reads again the member name after at, where Member started: the
// name it returned is gone once the walk went on.
func (s *Scanner) keyAt(at int) string {
	i := ws(s.data, at)
	if i < len(s.data) && s.data[i] == ',' {
		i = ws(s.data, i+1)
	}
	k := Scanner{data: s.data, pos: i}
	key := k.string()
	if len(key) > maxKeyInPath {
		return string(key[:maxKeyInPath]) + "…"
	}
	return string(key)
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
