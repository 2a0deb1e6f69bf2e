// Package docs holds the documentation; its test checks the links between
// the pages.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	atxHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// The pages whose links are checked, from the repository's root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md", "../test/README.md"}, docs...)
}

// TestLinksResolve checks that every relative link of the README and of
// docs/ names a file that exists and, with a #fragment, a heading of that
// file, by GitHub's rule for heading anchors.
func TestLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(t, path)
		anchors[path] = a
		return a
	}
	links := 0
	for _, page := range pages(t) {
		for i, line := range proseLines(t, page) {
			n := i + 1
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, fragment, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %q: %v", page, n, target, err)
						continue
					}
				}
				if fragment == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: link %q: a fragment of a file that is not Markdown", page, n, target)
					continue
				}
				if !anchorsOf(path)[fragment] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", page, n, target, path, fragment)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no links found: the pages moved?")
	}
}

// proseLines returns a page's lines, those of fenced code blocks (and the
// fences) made empty.
func proseLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	inFence := false
	for i, line := range lines {
		if fence.MatchString(line) {
			inFence = !inFence
			lines[i] = ""
		} else if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lowercased, every character but letters, digits, spaces, '-' and '_'
// dropped, spaces made '-', and a repeated anchor suffixed -1, -2, ...
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(t, path) {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := anchor(m[1])
		if k := seen[a]; k > 0 {
			anchors[a+"-"+strconv.Itoa(k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Installing, certificates and high availability": "installing-certificates-and-high-availability",
		"The demo on a node: `NODE=1 make demo`":         "the-demo-on-a-node-node1-make-demo",
		"What remains the author's responsibility":       "what-remains-the-authors-responsibility",
		"sidecar-operator.io/v1alpha1":                   "sidecar-operatoriov1alpha1",
		"Set-up: two commands":                           "set-up-two-commands",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
