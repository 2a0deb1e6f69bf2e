package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// The apiserver's admission histograms (k8s.io/apiserver/pkg/admission/metrics):
// a webhook's calls, each with the applying of its patch; each in-tree
// plugin's invocations, reinvocations included; and the two steps, admit
// (with its reinvocation) and validate.
const (
	metricWebhook = "apiserver_admission_webhook_admission_duration_seconds"
	metricPlugin  = "apiserver_admission_controller_admission_duration_seconds"
	metricStep    = "apiserver_admission_step_admission_duration_seconds"
)

// An admissionKey is what the histograms are summed by: the webhook's or
// plugin's name ("" for a step) and its type, admit or validate(-ing).
type admissionKey struct{ name, kind string }

type sumCount struct {
	sum   float64 // seconds
	count uint64
}

func (s sumCount) mean() time.Duration {
	if s.count == 0 {
		return 0
	}
	return time.Duration(s.sum / float64(s.count) * float64(time.Second))
}

// admissionMetrics are the histograms' sums and counts for pod creates, by
// metric and key.
type admissionMetrics map[string]map[admissionKey]sumCount

// scrapeAdmission reads the apiserver's /metrics, which the admin may read.
func scrapeAdmission(ctx context.Context, client kubernetes.Interface) (admissionMetrics, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the apiserver's /metrics: %w", err)
	}
	m := admissionMetrics{}
	for _, name := range []string{metricWebhook, metricPlugin, metricStep} {
		m[name] = map[admissionKey]sumCount{}
		family, ok := families[name]
		if !ok {
			continue
		}
		for _, sample := range family.GetMetric() {
			labels := labelsOf(sample)
			if labels["operation"] != "CREATE" {
				continue
			}
			k := admissionKey{name: labels["name"], kind: labels["type"]}
			s := m[name][k]
			s.sum += sample.GetHistogram().GetSampleSum()
			s.count += sample.GetHistogram().GetSampleCount()
			m[name][k] = s
		}
	}
	return m, nil
}

func labelsOf(sample *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range sample.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// since is what was observed after before was scraped.
func (m admissionMetrics) since(before admissionMetrics) admissionMetrics {
	d := admissionMetrics{}
	for name, byKey := range m {
		d[name] = map[admissionKey]sumCount{}
		for k, s := range byKey {
			b := before[name][k]
			if s.count > b.count {
				d[name][k] = sumCount{sum: s.sum - b.sum, count: s.count - b.count}
			}
		}
	}
	return d
}

// printAdmission prints what the admission metrics observed over the timed
// creates, pods per configuration: each webhook's calls per pod of its
// configuration (configs names the configuration of each bench webhook,
// listed in order; another webhook, Kyverno's, is "other") and their mean;
// then the steps and the in-tree plugins per create, over all
// configurations at once, since their metrics do not say which. The admit
// plugins run again for every pod a webhook patched, in patched of the
// configurations.
func printAdmission(d admissionMetrics, configs map[string]string, order []string, pods, configurations, patched int) {
	creates := pods * configurations
	fmt.Println("the apiserver's admission metrics over the timed creates:")
	fmt.Println("  webhook calls per pod of their configuration, and their mean (a call includes applying its patch):")
	webhooks := slices.SortedFunc(maps.Keys(d[metricWebhook]), func(a, b admissionKey) int {
		rank := func(k admissionKey) int {
			if i := slices.Index(order, configOf(configs, k.name)); i >= 0 {
				return i
			}
			return len(order)
		}
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.name, b.name), cmp.Compare(a.kind, b.kind))
	})
	for _, k := range webhooks {
		s := d[metricWebhook][k]
		fmt.Printf("    %-9s %-24s %-10s %4.2f  mean %7s\n", configOf(configs, k.name), strings.TrimSuffix(k.name, ".bench.sidecar-operator.io"), k.kind,
			float64(s.count)/float64(pods), round(s.mean()))
	}
	fmt.Printf("  per create, over all %d creates (%d counted); the admit plugins run again after any patch, even one that\n"+
		"  changes nothing: %d of %d configurations patch, so %.2f times expected\n",
		creates, d[metricStep][admissionKey{kind: "admit"}].count, patched, configurations, 1+float64(patched)/float64(configurations))
	perCreate := func(label string, s sumCount) {
		fmt.Printf("    %-36s %4.2f times  mean %7s  per create %7s\n", label, float64(s.count)/float64(creates), round(s.mean()),
			round(time.Duration(s.sum/float64(creates)*float64(time.Second))))
	}
	for _, kind := range []string{"admit", "validate"} {
		perCreate("step "+kind, d[metricStep][admissionKey{kind: kind}])
	}
	plugins := slices.SortedFunc(maps.Keys(d[metricPlugin]), func(a, b admissionKey) int {
		return cmp.Compare(d[metricPlugin][b].sum, d[metricPlugin][a].sum)
	})
	others := 0
	for _, k := range plugins {
		s := d[metricPlugin][k]
		if per := time.Duration(s.sum / float64(creates) * float64(time.Second)); per < 10*time.Microsecond {
			others++
			continue
		}
		perCreate(k.name+" "+k.kind, s)
	}
	fmt.Printf("    and %d more plugins under 10µs per create each\n", others)
}

func configOf(configs map[string]string, webhook string) string {
	if c, ok := configs[webhook]; ok {
		return c
	}
	return "other"
}
