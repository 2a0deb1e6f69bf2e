package chart

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

const chartDir = "../../charts/sidecar-operator"

// objects are a rendering's objects by kind/namespace/name, as JSON decodes
// them, so that two renderings compare by what they mean.
type objects map[string]map[string]any

func decode(t *testing.T, manifest []byte) objects {
	t.Helper()
	docs, err := sidecarfile.SplitYAML(bytes.NewReader(manifest))
	if err != nil {
		t.Fatal(err)
	}
	objs := objects{}
	for _, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if len(obj) == 0 {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		id := fmt.Sprintf("%v/%v/%v", obj["kind"], meta["namespace"], meta["name"])
		if objs[id] != nil {
			t.Fatalf("two objects %s", id)
		}
		objs[id] = obj
	}
	return objs
}

func loadChart(t *testing.T) *chartv2.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// helmTemplate renders the chart as `helm template --namespace namespace`
// does: an install with a client-side dry run.
func helmTemplate(c *chartv2.Chart, namespace string, values map[string]any) ([]byte, error) {
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true // no name check: nothing is installed
	install.ReleaseName, install.Namespace = "sidecar-operator", namespace
	rel, err := install.RunWithContext(context.Background(), c, values)
	if err != nil {
		return nil, err
	}
	return []byte(rel.(*releasev1.Release).Manifest), nil
}

func renderChart(t *testing.T, c *chartv2.Chart, namespace string, values map[string]any) objects {
	t.Helper()
	out, err := helmTemplate(c, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	// The one thing the chart adds: helm uninstall leaves the CRD, the
	// author policies that judge its Sidecars, and the grant policy.
	for _, id := range []string{"CustomResourceDefinition/<nil>/sidecars.sidecar-operator.io",
		"ValidatingAdmissionPolicy/<nil>/sidecar-operator-authors", "ValidatingAdmissionPolicyBinding/<nil>/sidecar-operator-authors",
		"ValidatingAdmissionPolicy/<nil>/sidecar-operator-grants", "ValidatingAdmissionPolicyBinding/<nil>/sidecar-operator-grants",
		"ValidatingAdmissionPolicy/<nil>/sidecar-operator-mandatory-authors", "ValidatingAdmissionPolicyBinding/<nil>/sidecar-operator-mandatory-authors"} {
		meta := objs[id]["metadata"].(map[string]any)
		annotations, _ := meta["annotations"].(map[string]any)
		if annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s's annotations %v lack helm.sh/resource-policy: keep", id, annotations)
		}
		delete(annotations, "helm.sh/resource-policy")
		if len(annotations) == 0 {
			delete(meta, "annotations")
		}
	}
	return objs
}

func renderManifests(t *testing.T, o cli.ManifestOptions) objects {
	t.Helper()
	out, err := cli.RenderManifests(o)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	// Helm creates the release's namespace before any object (helm install
	// --create-namespace); a chart cannot.
	delete(objs, "Namespace/<nil>/"+o.Namespace)
	return objs
}

// sameObjects reports the objects that one rendering lacks or has otherwise.
func sameObjects(t *testing.T, got, want objects) {
	t.Helper()
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if got[id] == nil {
			t.Errorf("%s missing", id)
			continue
		}
		if !reflect.DeepEqual(got[id], want[id]) {
			g, _ := yaml.Marshal(got[id])
			w, _ := yaml.Marshal(want[id])
			t.Errorf("%s differs; got\n%s\nwant\n%s", id, g, w)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		if want[id] == nil {
			t.Errorf("%s unexpected", id)
		}
	}
}

// manifestsValue is a chart value that a manifests option implements.
type manifestsValue struct {
	name   string
	values map[string]any
	set    func(*cli.ManifestOptions)
}

var manifestsValues = []manifestsValue{
	{"certMode", map[string]any{"certMode": "cert-manager"}, func(o *cli.ManifestOptions) { o.CertMode = "cert-manager" }},
	{"clientAuth", map[string]any{"clientAuth": true}, func(o *cli.ManifestOptions) { o.ClientAuth = true }},
	{"clientCA", map[string]any{"clientCA": testCA}, func(o *cli.ManifestOptions) { o.ClientCA = testCA }},
	{"webhook.failurePolicy", map[string]any{"webhook": map[string]any{"failurePolicy": "Ignore"}},
		func(o *cli.ManifestOptions) { o.FailurePolicy = admissionv1.Ignore }},
	{"networkPolicy.adminFromNamespaceLabel", map[string]any{"networkPolicy": map[string]any{"adminFromNamespaceLabel": "kubernetes.io/metadata.name=monitoring"}},
		func(o *cli.ManifestOptions) { o.AdminFromNamespaceLabel = "kubernetes.io/metadata.name=monitoring" }},
}

const testCA = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"

// merged is a, with b's entries, merging those both have.
func merged(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	for k, v := range b {
		if inner, ok := v.(map[string]any); ok {
			if outer, ok := out[k].(map[string]any); ok {
				v = merged(outer, inner)
			}
		}
		out[k] = v
	}
	return out
}

// TestDefaultValuesRenderTheManifests is the chart's reason to be generated:
// helm template with the default values renders what `sidecar-operator
// manifests` does, with the chart's image, in the release's namespace.
func TestDefaultValuesRenderTheManifests(t *testing.T) {
	c := loadChart(t)
	image := cli.ImageRepository + ":" + c.Metadata.AppVersion
	for _, namespace := range []string{"sidecar-operator-system", "ops"} {
		t.Run(namespace, func(t *testing.T) {
			sameObjects(t, renderChart(t, c, namespace, nil),
				renderManifests(t, cli.ManifestOptions{Namespace: namespace, Image: image, CertMode: "self"}))
		})
	}
}

// TestValuesRenderWhatTheirManifestsOptionsDo renders every combination of
// the values manifests has options for, with an image of its own: each
// renders what manifests renders with the options, and each alone changes
// the default rendering.
func TestValuesRenderWhatTheirManifestsOptionsDo(t *testing.T) {
	c := loadChart(t)
	image := map[string]any{"image": map[string]any{"repository": "registry.example.com/so", "tag": "v9.9.9"}}
	defaults := renderChart(t, c, "ops", image)
	for combination := 1; combination < 1<<len(manifestsValues); combination++ {
		values, names := image, []string(nil)
		o := cli.ManifestOptions{Namespace: "ops", Image: "registry.example.com/so:v9.9.9", CertMode: "self"}
		for i, v := range manifestsValues {
			if combination&(1<<i) != 0 {
				values = merged(values, v.values)
				names = append(names, v.name)
				v.set(&o)
			}
		}
		t.Run(strings.Join(names, ","), func(t *testing.T) {
			got := renderChart(t, c, "ops", values)
			sameObjects(t, got, renderManifests(t, o))
			if len(names) == 1 && reflect.DeepEqual(got, defaults) {
				t.Errorf("%s changes nothing", names[0])
			}
		})
	}
}

// TestChartOnlyValues renders each value manifests has no option for: the
// rendering is the default one with the value's effect, and nothing else.
func TestChartOnlyValues(t *testing.T) {
	c := loadChart(t)
	const (
		deployment       = "Deployment/ops/sidecar-operator"
		controller       = "Deployment/ops/sidecar-operator-controller"
		policy           = "NetworkPolicy/ops/sidecar-operator"
		controllerPolicy = "NetworkPolicy/ops/sidecar-operator-controller"
		budget           = "PodDisruptionBudget/ops/sidecar-operator"
		controllerBudget = "PodDisruptionBudget/ops/sidecar-operator-controller"
	)
	apiserver := map[string]any{"ipBlock": map[string]any{"cidr": "172.16.0.0/28"}}
	resources := map[string]any{"requests": map[string]any{"cpu": "1", "memory": "1Gi"}, "limits": map[string]any{"memory": "2Gi"}}
	podSpecOf := func(objs objects, id string) map[string]any {
		return objs[id]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	}
	managerOf := func(objs objects, id string) map[string]any {
		return podSpecOf(objs, id)["containers"].([]any)[0].(map[string]any)
	}
	podMetaOf := func(objs objects, id string) map[string]any {
		return objs[id]["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	type podValue struct {
		name  string
		value any
		set   func(objects, string, any) // what the value does to a Deployment
	}
	podField := func(field string) func(objects, string, any) {
		return func(objs objects, id string, v any) { podSpecOf(objs, id)[field] = v }
	}
	podValues := []podValue{
		{"nodeSelector", map[string]any{"node-role.kubernetes.io/system": "true"}, podField("nodeSelector")},
		{"tolerations", []any{map[string]any{"key": "system", "operator": "Exists", "effect": "NoSchedule"}}, podField("tolerations")},
		{"affinity", map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"system"}}}}}}}},
			podField("affinity")},
		{"topologySpreadConstraints", []any{map[string]any{"maxSkew": float64(2), "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"app": "x"}}}}, podField("topologySpreadConstraints")},
		{"priorityClassName", "platform-critical", podField("priorityClassName")},
		{"podSecurityContext", map[string]any{"fsGroup": float64(65532)}, podField("securityContext")},
		{"podAnnotations", map[string]any{"example.com/team": "platform"}, func(objs objects, id string, v any) { podMetaOf(objs, id)["annotations"] = v }},
		{"podLabels", map[string]any{"example.com/team": "platform"}, func(objs objects, id string, v any) {
			podMetaOf(objs, id)["labels"].(map[string]any)["example.com/team"] = "platform"
		}},
		// Helm merges a mapping with its default: what is set is added to
		// the hardened default (null drops a default field).
		{"securityContext", map[string]any{"runAsUser": float64(65532)}, func(objs objects, id string, v any) {
			managerOf(objs, id)["securityContext"].(map[string]any)["runAsUser"] = float64(65532)
		}},
		{"extraArgs", []any{"--kube-api-qps=50"}, func(objs objects, id string, v any) {
			manager := managerOf(objs, id)
			manager["args"] = append(manager["args"].([]any), v.([]any)...)
		}},
		{"extraEnv", []any{map[string]any{"name": "GOMEMLIMIT", "value": "400MiB"}}, func(objs objects, id string, v any) {
			manager := managerOf(objs, id)
			manager["env"] = append(manager["env"].([]any), v.([]any)...)
		}},
	}
	for _, pv := range podValues {
		for _, component := range []struct{ prefix, id string }{{"", deployment}, {"controller.", controller}} {
			t.Run(component.prefix+pv.name, func(t *testing.T) {
				values := map[string]any{pv.name: pv.value}
				if component.prefix != "" {
					values = map[string]any{"controller": values}
				}
				want := renderChart(t, c, "ops", nil)
				pv.set(want, component.id, pv.value)
				sameObjects(t, renderChart(t, c, "ops", values), want)
			})
		}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		effect func(objects)
	}{
		{"replicas", map[string]any{"replicas": 3}, func(objs objects) {
			objs[deployment]["spec"].(map[string]any)["replicas"] = float64(3)
		}},
		{"one replica on purpose, no budget to block drains", map[string]any{"replicas": 1, "singleReplica": true}, func(objs objects) {
			objs[deployment]["spec"].(map[string]any)["replicas"] = float64(1)
			delete(objs, budget)
		}},
		{"controller.replicas", map[string]any{"controller": map[string]any{"replicas": 1}}, func(objs objects) {
			objs[controller]["spec"].(map[string]any)["replicas"] = float64(1)
			delete(objs, controllerBudget)
		}},
		{"image.pullPolicy", map[string]any{"image": map[string]any{"pullPolicy": "Always"}}, func(objs objects) {
			managerOf(objs, deployment)["imagePullPolicy"] = "Always"
			managerOf(objs, controller)["imagePullPolicy"] = "Always"
		}},
		{"resources", map[string]any{"resources": resources}, func(objs objects) {
			managerOf(objs, deployment)["resources"] = resources
		}},
		{"controller.resources", map[string]any{"controller": map[string]any{"resources": resources}}, func(objs objects) {
			managerOf(objs, controller)["resources"] = resources
		}},
		{"networkPolicy.enabled", map[string]any{"networkPolicy": map[string]any{"enabled": false}}, func(objs objects) {
			delete(objs, policy)
			delete(objs, controllerPolicy)
		}},
		{"networkPolicy.webhookFrom", map[string]any{"networkPolicy": map[string]any{"webhookFrom": []any{apiserver}}}, func(objs objects) {
			ingress := objs[policy]["spec"].(map[string]any)["ingress"].([]any)
			ingress[0].(map[string]any)["from"] = []any{apiserver}
		}},
		{"image.digest", map[string]any{"image": map[string]any{"digest": digest}}, func(objs objects) {
			for _, id := range []string{deployment, controller} {
				managerOf(objs, id)["image"] = cli.ImageRepository + "@" + digest
			}
		}},
		{"webhook.timeoutSeconds", map[string]any{"webhook": map[string]any{"timeoutSeconds": 5}}, func(objs objects) {
			manager := managerOf(objs, controller)
			manager["args"] = append(manager["args"].([]any), "--webhook-timeout-seconds=5")
		}},
		{"webhook.excludeNamespaces", map[string]any{"webhook": map[string]any{"excludeNamespaces": []any{"monitoring", "logging"}}}, func(objs objects) {
			manager := managerOf(objs, controller)
			manager["args"] = append(manager["args"].([]any), "--exclude-namespace=monitoring,logging")
		}},
		{"serviceMonitor", map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "30s", "labels": map[string]any{"release": "prom"}}},
			func(objs objects) {
				objs["ServiceMonitor/ops/sidecar-operator"] = map[string]any{
					"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
					"metadata": map[string]any{"name": "sidecar-operator", "namespace": "ops", "labels": map[string]any{"release": "prom"}},
					"spec": map[string]any{
						"selector": map[string]any{"matchExpressions": []any{map[string]any{"key": "app.kubernetes.io/name", "operator": "In",
							"values": []any{"sidecar-operator", "sidecar-operator-controller"}}}},
						"endpoints": []any{map[string]any{"port": "admin", "scheme": "https", "path": "/metrics", "interval": "30s",
							"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token", "tlsConfig": map[string]any{"insecureSkipVerify": true}}},
					},
				}
			}},
		{"imagePullSecrets", map[string]any{"imagePullSecrets": []any{map[string]any{"name": "regcred"}}}, func(objs objects) {
			for _, id := range []string{deployment, controller} {
				podSpecOf(objs, id)["imagePullSecrets"] = []any{map[string]any{"name": "regcred"}}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := renderChart(t, c, "ops", nil)
			tc.effect(want)
			sameObjects(t, renderChart(t, c, "ops", tc.values), want)
		})
	}
}

// TestSchemaRefusesWhatManifestsRefuses: the chart checks its values where
// manifests checks its flags, and refuses a misspelt value.
func TestSchemaRefusesWhatManifestsRefuses(t *testing.T) {
	c := loadChart(t)
	for name, values := range map[string]map[string]any{
		"cert mode":               {"certMode": "openssl"},
		"failure policy":          {"webhook": map[string]any{"failurePolicy": "fail"}},
		"timeout too long":        {"webhook": map[string]any{"timeoutSeconds": 31}},
		"interval not a duration": {"serviceMonitor": map[string]any{"interval": "often"}},
		"excluded not a name":     {"webhook": map[string]any{"excludeNamespaces": []any{"Team A"}}},
		"label without value":     {"networkPolicy": map[string]any{"adminFromNamespaceLabel": "monitoring"}},
		"label not a label":       {"networkPolicy": map[string]any{"adminFromNamespaceLabel": "team=a b"}},
		"no replica":              {"replicas": 0},
		// A single webhook replica blocks pod creation while it restarts.
		"one replica by chance": {"replicas": 1},
		"no controller":         {"controller": map[string]any{"replicas": 0}},
		"client CA not PEM":     {"clientCA": "ca.crt"},
		"misspelt value":        {"replica": 3},
		"misspelt image value":  {"image": map[string]any{"pullpolicy": "Always"}},
		"digest not sha256":     {"image": map[string]any{"digest": "latest"}},
		"pull secret unnamed":   {"imagePullSecrets": []any{map[string]any{}}},
		"node selector a list":  {"nodeSelector": []any{"pool=system"}},
		"extra arg not a flag":  {"extraArgs": []any{1}},
		"misspelt pod value":    {"controller": map[string]any{"tolleration": []any{}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := helmTemplate(c, "ops", values); err == nil || !strings.Contains(err.Error(), "schema") {
				t.Errorf("error %v, want the schema's", err)
			}
		})
	}
}

// TestMergeRefusesWhatItCannotTemplate: an option that removes or changes
// part of the default rendering, instead of adding to it, fails the
// generator rather than render otherwise than manifests.
func TestMergeRefusesWhatItCannotTemplate(t *testing.T) {
	base := map[string]any{"spec": map[string]any{"replicas": 2, "args": []any{"run", "--leader-elect"}}}
	for _, tc := range []struct {
		name    string
		variant map[string]any
		changes string
		wantErr string
	}{
		{"removes an entry", map[string]any{"spec": map[string]any{"args": []any{"run", "--leader-elect"}}}, "", "spec.replicas: o removes it"},
		{"removes a list item", map[string]any{"spec": map[string]any{"replicas": 2, "args": []any{"run"}}}, "", "not the default list or more"},
		{"changes a scalar", map[string]any{"spec": map[string]any{"replicas": 3, "args": []any{"run", "--leader-elect"}}}, "", "changes 2 to 3"},
		{"changes a scalar it names", map[string]any{"spec": map[string]any{"replicas": 3, "args": []any{"run", "--leader-elect"}}}, ".Values.replicas", ""},
		{"adds", map[string]any{"spec": map[string]any{"replicas": 2, "args": []any{"run", "--leader-elect", "--x"}, "paused": true}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := build(base)
			if err != nil {
				t.Fatal(err)
			}
			err = n.merge(tc.variant, option{name: "o", guard: ".Values.o", changes: tc.changes}, "")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
