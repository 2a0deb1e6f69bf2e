package inject

import (
	encjson "encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// FuzzInjectJSON checks, for any pod JSON the apiserver would accept, that the
// JSON path and the typed path agree, that the patch applies and yields the
// mutated Pod, and that re-injecting the result is a no-op.
func FuzzInjectJSON(f *testing.F) {
	e := mustEngine(f, exampleSidecars(f)...)
	f.Add(reviewPod(f, "admissionreview-pod.json"))
	f.Add(pod(map[string]any{"labels": map[string]any{"logging": "fluentd"}}, nil))
	f.Add([]byte(`{"metadata":{"annotations":{"xxl-agent/enable":"1","xxl-agent/job-admin-addr":"a","xxl-agent/target-container":"b","xxl-agent/job-name":"c~/"}},"spec":{"containers":[{"name":"x","volumeMounts":[]}],"volumes":null}}`))
	f.Add([]byte(`{"metadata":{"labels":{"logging":"fluentd"},"annotations":null},"spec":{"initContainers":[],"containers":[{"name":"fluentd"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := decodePod(raw); err != nil {
			t.Skip()
		}
		var view PodView
		if err := DecodePodView(raw, &view); err != nil {
			t.Fatalf("the apiserver decodes this pod, the engine does not: %v", err)
		}
		checkBothPaths(t, e, raw, "fuzz")
	})
}

// FuzzAppendRecord checks the hand-written record writer against
// encoding/json: what it writes decodes to the record it was given, with
// invalid UTF-8 replaced as encoding/json replaces it.
func FuzzAppendRecord(f *testing.F) {
	f.Add("fluentd", "deb2fc0052937f2c", "fluentd", "wesSrEHW", "shqdzTtT", "r2.1.0.CyIedCNO", "k1700000000.1T2a", uint8(2))
	f.Add("a\"b\\c", "<&>\u2028", "x\xff", "", "", "\x00", "", uint8(0))
	f.Add("a", "", "", "", "", "", "", uint8(1))
	f.Fuzz(func(t *testing.T, name, revision, container, digest, volumeDigest, owned, signature string, guarded uint8) {
		rec := v1alpha1.InjectionRecord{Name: name, Revision: revision, Digest: digest, VolumeDigest: volumeDigest, Owned: owned, Signature: signature}
		if guarded%3 > 0 { // 0: absent, as in records from before the field
			rec.Guarded = new(guarded%3 == 2)
		}
		if container != "" {
			rec.Containers = []string{container, container + "-2"}
		}
		raw := appendRecord(nil, &rec, &jsonSyntax)
		checkStatusLiteral(t, []v1alpha1.InjectionRecord{rec, rec})
		var got v1alpha1.InjectionRecord
		if err := encjson.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s does not decode: %v", raw, err)
		}
		want := rec
		valid := func(s string) string { // each invalid byte becomes U+FFFD, as encoding/json does
			var b strings.Builder
			for _, r := range s {
				b.WriteRune(r) // ranging over a string yields U+FFFD per invalid byte
			}
			return b.String()
		}
		want.Name, want.Revision, want.Digest, want.VolumeDigest, want.Owned, want.Signature =
			valid(name), valid(revision), valid(digest), valid(volumeDigest), valid(owned), valid(signature)
		for i := range want.Containers {
			want.Containers[i] = valid(want.Containers[i])
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("wrote %s, which decodes to %+v, want %+v", raw, got, want)
		}
	})
}

// checkStatusLiteral: the status as the patch holds it is a JSON string of
// the status's JSON, whether written escaped or quoted after, and a buffer
// already written keeps what it held.
func checkStatusLiteral(t *testing.T, records []v1alpha1.InjectionRecord) {
	t.Helper()
	literal := statusLiteral(nil, records)
	if after := statusLiteral([]byte("kept"), records); string(after) != "kept"+string(literal) {
		t.Fatalf("the status literal written after %q is %s, want %s after it", "kept", after, literal)
	}
	var status string
	if err := encjson.Unmarshal(literal, &status); err != nil {
		t.Fatalf("the status literal %s is not a JSON string: %v", literal, err)
	}
	if want := string(appendStatus(nil, records, &jsonSyntax)); status != want {
		t.Fatalf("the status literal %s reads %s, want %s", literal, status, want)
	}
}

// FuzzInjectSizedAndLabelled is FuzzInjectJSON for a Sidecar that sizes its
// container from a parameter and from the app's requests, and adds
// templated labels and annotations, some of which the pod may have: the
// patch's metadata and resources must be what the typed path sets.
func FuzzInjectSizedAndLabelled(f *testing.F) {
	sc := sizedAgent(v1alpha1.ContainerResources{Container: "agent",
		Requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "{{ .Parameters.cpu }}"},
		AppShare: map[corev1.ResourceName]v1alpha1.AppShare{corev1.ResourceMemory: {PercentOfApp: 10, Max: new(resource.MustParse("128Mi"))}}})
	sc.Spec.PodMetadata = &v1alpha1.PodMetadata{
		Labels:      map[string]string{"agent.example.com/cpu": "{{ .Parameters.cpu }}", "team": "platform"},
		Annotations: map[string]string{"prometheus.io/port": "9100", "agent.example.com/cpu": "x"},
		Overwrite:   []string{"team"},
	}
	e := mustEngine(f, sc)
	f.Add([]byte(`{"metadata":{"annotations":{"agent.example.com/cpu":"250m"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"memory":"1Gi"}}}]}}`))
	f.Add([]byte(`{"metadata":{"labels":null,"annotations":null},"spec":{"containers":[{"name":"app"},{"name":"b","resources":{"requests":{"memory":"3"}}}]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"team":"shop","agent.example.com/cpu":"1"},"annotations":{"prometheus.io/port":"1"}},"spec":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := decodePod(raw); err != nil {
			t.Skip()
		}
		checkBothPaths(t, e, raw, "fuzz")
	})
}

// FuzzParseStatus checks the one-pass status reader against encoding/json:
// where it reads a document, encoding/json decodes the same status from it;
// where it refuses one that encoding/json decodes, the document is one the
// webhook never writes, judged here from encoding/json's tokens: a member
// given twice, too many records or container names, or a string that is
// not plain printable ASCII.
func FuzzParseStatus(f *testing.F) {
	rec := v1alpha1.InjectionRecord{Name: "fluentd", Revision: "deb2fc0052937f2c", Containers: []string{"fluentd", "fluent-bit"},
		Digest: "6_06Q64OWYUDuFNGXz3wymdWhQmbkrd2AA--WFFWxWM", VolumeDigest: "ZyKRNfTqpUmagpfzNUaZ2O2XbgHZWm896_aqH_D6QxY",
		Owned: "r2.1.0.CyIedCNOdCNOEq4yVeoUlcubZdX1dCNOdCNOltVvdCNO_kSodCNO;varlog", Signature: "k1700000000.1T2a"}
	written, err := encjson.Marshal(v1alpha1.InjectionStatus{Sidecars: []v1alpha1.InjectionRecord{rec, {Name: "xxl-agent", Revision: "1"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(written)
	for _, seed := range []string{
		`null`, `{}`, ` {"sidecars":[]} `, `{"sidecars":null}`, `{"sidecars":[null,{}]}`, `{"x":[1,{"y":null}],"sidecars":[{"name":"a"}]}`,
		`{"SIDECARS":[{"NAME":"a","Containers":["x",null],"containers2":1}]}`, `{"sidecars":[{"name":null,"revision":"r"}]}`,
		`{"ſidecars":[{"ſignature":"s"}]}`, `{"sidecars":[{"containers":[]}]}`, `{"sidecars":[{"name":"a"}],"Sidecars":null}`,
		`{"sidecars":[{"name":"a","Name":"b"}]}`, `{"sidecars":[{"name":"\u0061"}]}`, `{"sidecars":[{"name":"é"}]}`,
		`{"sidecars":[{"name":"a","signature":"s"}],"sidecars":[{"name":"b"}]}`, `{"sidecars":[{"containers":["a","b"],"containers":[null]}]}`,
		`{"sidecars":[{"name":1}]}`, `{"sidecars":[{"containers":"a"}]}`, `{"sidecars":[1]}`, `[]`, `{"sidecars":[{}]`,
		`{"sidecars":[{"name":"a","guarded":true},{"guarded":false},{"Guarded":null}]}`, `{"sidecars":[{"guarded":null,"GUARDED":false}]}`,
		`{"sidecars":[{"guarded":1}]}`, `{"sidecars":[{"guarded":"true"}]}`, `{"sidecars":[{"guarded":tru}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, err := ParseStatus(string(doc))
		var want v1alpha1.InjectionStatus
		wantErr := encjson.Unmarshal(doc, &want)
		switch {
		case err == nil && wantErr != nil:
			t.Fatalf("ParseStatus(%q) read %+v; encoding/json refuses it: %v", doc, got, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("ParseStatus(%q) = %#v; encoding/json decodes %#v", doc, got, want)
		case err != nil && wantErr == nil && !neverWritten(doc):
			t.Fatalf("ParseStatus(%q) refuses what the webhook could write: %v (encoding/json decodes %+v)", doc, err, want)
		}
	})
}

// neverWritten reports, from encoding/json's tokens of a valid document,
// whether it is a status the webhook never writes.
func neverWritten(doc []byte) bool {
	for _, c := range doc {
		if c == '\\' || c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r' || c > 0x7e {
			return true // an escape, a control character or non-ASCII: maybe in a record's string
		}
	}
	if len(doc) > MaxStatusBytes {
		return true
	}
	dec := encjson.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	tok, _ := dec.Token()
	if tok != encjson.Delim('{') {
		return false
	}
	fields := []string{"name", "guarded", "revision", "containers", "digest", "volumeDigest", "owned", "signature"}
	sidecars := 0
	for dec.More() {
		key, _ := dec.Token()
		if !strings.EqualFold(key.(string), "sidecars") {
			skipTokens(dec)
			continue
		}
		if sidecars++; sidecars > 1 {
			return true
		}
		if tok, _ := dec.Token(); tok != encjson.Delim('[') {
			continue // null: anything else would not decode
		}
		records := 0
		for dec.More() {
			if records++; records > MaxStatusRecords {
				return true
			}
			if tok, _ := dec.Token(); tok != encjson.Delim('{') {
				continue // null
			}
			seen := map[string]bool{}
			for dec.More() {
				key, _ := dec.Token()
				field := ""
				for _, f := range fields {
					if strings.EqualFold(key.(string), f) {
						field = f
					}
				}
				if field != "" && seen[field] {
					return true
				}
				seen[field] = true
				if field != "containers" {
					skipTokens(dec)
					continue
				}
				if tok, _ := dec.Token(); tok == encjson.Delim('[') {
					names := 0
					for ; dec.More(); names++ {
						_, _ = dec.Token()
					}
					_, _ = dec.Token()
					if names > signing.MaxRecordContainers {
						return true
					}
				}
			}
			_, _ = dec.Token()
		}
		_, _ = dec.Token()
	}
	return false
}

// skipTokens reads one value's tokens.
func skipTokens(dec *encjson.Decoder) {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch tok {
		case encjson.Delim('{'), encjson.Delim('['):
			depth++
		case encjson.Delim('}'), encjson.Delim(']'):
			depth--
		}
		if depth == 0 {
			return
		}
	}
}
