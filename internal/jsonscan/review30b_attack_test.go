package jsonscan

import (
	"runtime"
	"strings"
	"testing"
)

func allocOf(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// TestAttack30bPathAtBounded: a forged document names a type error's value
// at the bottom of the deepest nesting, under long escaped or invalid UTF-8
// keys, or inside a long string; PathAt allocates a small share of the
// document and names at most maxPathLength bytes.
func TestAttack30bPathAtBounded(t *testing.T) {
	longKey := func(unit string, n int) string { return `"` + strings.Repeat(unit, n) + `"` }
	deepObjects := func(key string, depth int) (string, int) {
		doc := strings.Repeat("{"+key+":", depth) + "1" + strings.Repeat("}", depth)
		return doc, strings.Index(doc, "1")
	}
	type shape struct {
		name   string
		doc    string
		offset int
	}
	shapes := make([]shape, 0, 12)
	arr := strings.Repeat("[", MaxDepth) + "1" + strings.Repeat("]", MaxDepth)
	shapes = append(shapes, shape{"arrays MaxDepth deep", arr, MaxDepth})
	d, o := deepObjects(`"a"`, MaxDepth)
	shapes = append(shapes, shape{"objects MaxDepth deep", d, o})
	for _, k := range []struct{ name, unit string }{{"escaped", `\u00e9`}, {"invalid UTF-8", "\xff"}, {"plain", "a"}} {
		d, o := deepObjects(longKey(k.unit, 1<<16), 40)
		shapes = append(shapes, shape{"40 levels of 64 Ki-unit " + k.name + " keys", d, o})
		one := `{` + longKey(k.unit, 1<<20) + `:1}`
		shapes = append(shapes, shape{"one 1 Mi-unit " + k.name + " key", one, len(one) - 2})
		many := `{` + strings.Repeat(longKey(k.unit, 1<<10)+`:0,`, 1<<10) + `"x":1}`
		shapes = append(shapes, shape{"1 Ki members of 1 Ki-unit " + k.name + " keys passed", many, len(many) - 2})
	}
	str := `{"a":"` + strings.Repeat("x", 1<<20) + `"}`
	shapes = append(shapes, shape{"offset inside a 1 MiB string", str, len(str) / 2})
	for _, sh := range shapes {
		data := []byte(sh.doc)
		var path string
		alloc := allocOf(func() { path = PathAt(data, sh.offset) })
		t.Logf("%s: document %d bytes, PathAt allocated %d bytes (%.2f of it), path %d bytes",
			sh.name, len(data), alloc, float64(alloc)/float64(len(data)), len(path))
		if len(path) > maxPathLength+len("…") {
			t.Errorf("%s: path of %d bytes", sh.name, len(path))
		}
		if alloc > 64<<10 && alloc > int64(len(data))/4 {
			t.Errorf("%s: PathAt allocated %d bytes for a document of %d", sh.name, alloc, len(data))
		}
	}
}
