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
		for s.next('}') {
			// The name is skipped, not decoded: only the path's are read.
			at := ws(s.data, s.pos)
			if at >= len(s.data) || s.data[at] != '"' {
				return false
			}
			end, err := skipString(s.data, at)
			if err != nil {
				return false
			}
			if s.pos = ws(s.data, end); s.pos >= len(s.data) || s.data[s.pos] != ':' {
				return false
			}
			s.pos++
			if s.find(offset, depth+1, segments) {
				s.segment(depth, segments, func() string { return keySegment(keyAt(s.data, at)) })
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

// keyAt decodes at most the first maxKeyInPath bytes' worth of the member
// name whose quote is at at: a name may be megabytes of escapes.
func keyAt(d []byte, at int) string {
	end, _, _, err := scanString(d, at)
	if err != nil {
		return ""
	}
	raw, cut := d[at+1:end], false
	if limit := 6 * maxKeyInPath; len(raw) > limit {
		raw, cut = raw[:limit], true
		// Not inside an escape: walk the escapes from the start.
		for i := 0; i < len(raw); i++ {
			if raw[i] != '\\' {
				continue
			}
			n := 2
			if i+1 < len(raw) && raw[i+1] == 'u' {
				n = 6
			}
			if i+n > len(raw) {
				raw = raw[:i]
				break
			}
			i += n - 1
		}
	}
	key := unquote(nil, raw)
	if len(key) > maxKeyInPath {
		key, cut = key[:maxKeyInPath], true
	}
	if cut {
		return string(key) + "…"
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
