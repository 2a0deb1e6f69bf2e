// Command gen-crd-quantities narrows the schema controller-gen writes for
// the quantities of the corev1 types a Sidecar embeds (a container's
// resources, appShare's bounds) to what the operator parses at a bounded
// cost (inject.QuantityReadable): at most inject.MaxQuantityLength bytes and
// an exponent of at most two digits. The apiserver does not parse the
// quantities of a custom resource; the operator's controllers do, and
// resource.ParseQuantity("1e-99999999") takes 80 s and 414 MiB.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

const (
	crd      = "config/crd/bases/sidecar-operator.io_sidecars.yaml"
	upstream = `pattern: ^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	narrowed = `pattern: ^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$`
)

func main() {
	data, err := os.ReadFile(crd)
	if err != nil {
		fail(err)
	}
	lines := strings.Split(string(data), "\n")
	out := make([]string, 0, len(lines)+32)
	narrowedCount := 0
	for _, line := range lines {
		rest := strings.TrimLeft(line, " ")
		if rest != upstream {
			out = append(out, line)
			continue
		}
		indent := line[:len(line)-len(rest)]
		out = append(out, fmt.Sprintf("%smaxLength: %d", indent, inject.MaxQuantityLength), indent+narrowed)
		narrowedCount++
	}
	if narrowedCount == 0 {
		fail(fmt.Errorf("%s: no quantity schema to narrow: has controller-gen changed its pattern?", crd))
	}
	if err := os.WriteFile(crd, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen-crd-quantities:", err)
	os.Exit(1)
}
