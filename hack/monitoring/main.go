// Command monitoring turns config/monitoring into promtool's inputs, and
// lists the metrics its queries select:
//
//	go run . -config ../../config/monitoring -out DIR
//
// It writes into DIR the PrometheusRule's groups (prometheusrule.rules.yaml,
// for promtool check rules and test rules), each dashboard query as a
// recording rule (dashboard.rules.yaml, for promtool check rules) and a copy
// of prometheusrule_test.yaml beside them, and prints each metric name once.
// It lives in promtool's module so that it parses with promtool's parser.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// grafanaVariables stand for the dashboard's variables, so that its queries
// parse as PromQL.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m")

func main() {
	config := flag.String("config", "", "the config/monitoring directory")
	out := flag.String("out", "", "where to write promtool's inputs")
	flag.Parse()
	names, err := run(*config, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, name := range names {
		fmt.Println(name)
	}
}

func run(config, out string) ([]string, error) {
	groups, err := ruleGroups(filepath.Join(config, "prometheusrule.yaml"))
	if err != nil {
		return nil, err
	}
	dashboard, err := dashboardRules(filepath.Join(config, "dashboard.json"))
	if err != nil {
		return nil, err
	}
	tests, err := os.ReadFile(filepath.Join(config, "prometheusrule_test.yaml"))
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, g := range append(groups.Groups, dashboard.Groups...) {
		for _, r := range g.Rules {
			if err := addMetricNames(names, r.Expr); err != nil {
				return nil, fmt.Errorf("%s%s: %w", r.Alert, r.Record, err)
			}
		}
	}
	for file, v := range map[string]any{"prometheusrule.rules.yaml": groups, "dashboard.rules.yaml": dashboard} {
		b, err := yaml.Marshal(v)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(out, file), b, 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(out, "prometheusrule_test.yaml"), tests, 0o644); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(names)), nil
}

// rules is a rules file: what promtool reads, and the PrometheusRule's spec.
type rules struct {
	Groups []group `yaml:"groups"`
}

type group struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

// rule holds the fields the PrometheusRule's rules use; decoding refuses
// others, so that none is dropped before promtool sees the rule.
type rule struct {
	Alert       string            `yaml:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

func ruleGroups(path string) (rules, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return rules{}, err
	}
	var obj struct {
		APIVersion string         `yaml:"apiVersion"`
		Kind       string         `yaml:"kind"`
		Metadata   map[string]any `yaml:"metadata"`
		Spec       rules          `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&obj); err != nil {
		return rules{}, fmt.Errorf("%s: %w", path, err)
	}
	if obj.Kind != "PrometheusRule" || len(obj.Spec.Groups) == 0 {
		return rules{}, fmt.Errorf("%s: want a PrometheusRule with groups, got kind %q", path, obj.Kind)
	}
	return obj.Spec, nil
}

// panel is what a Grafana panel holds of interest here; a collapsed row
// nests its panels.
type panel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// dashboardRules makes each query of the dashboard a recording rule.
func dashboardRules(path string) (rules, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return rules{}, err
	}
	var dashboard struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		return rules{}, fmt.Errorf("%s: %w", path, err)
	}
	g := group{Name: "dashboard"}
	var walk func([]panel) error
	walk = func(panels []panel) error {
		for _, p := range panels {
			for _, t := range p.Targets {
				if t.Expr == "" {
					return fmt.Errorf("%s: panel %d %q, query %s: no expr", path, p.ID, p.Title, t.RefID)
				}
				g.Rules = append(g.Rules, rule{
					Record: fmt.Sprintf("dashboard:panel_%d_%s", p.ID, t.RefID),
					Expr:   grafanaVariables.Replace(t.Expr),
				})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(dashboard.Panels); err != nil {
		return rules{}, err
	}
	if len(g.Rules) == 0 {
		return rules{}, errors.New(path + ": no queries")
	}
	return rules{Groups: []group{g}}, nil
}

// addMetricNames adds the name of each series expr selects.
func addMetricNames(names map[string]bool, expr string) error {
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return err
	}
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			names[vs.Name] = true
		}
		return nil
	})
	return nil
}
