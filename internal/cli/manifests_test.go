package cli

import (
	"strings"
	"testing"
)

func TestManifestsTakeTheirFlags(t *testing.T) {
	for _, tc := range []struct {
		name            string
		args            []string
		want, wantNot   []string
		wantErrContains string
	}{
		{name: "defaults", args: nil,
			want:    []string{"namespace: sidecar-operator-system", "image: ghcr.io/sidecar-operator/sidecar-operator:latest", "kind: PodDisruptionBudget", "replicas: 2"},
			wantNot: []string{"cert-manager.io", "--cert-mode=cert-manager"}},
		{name: "namespace and image with a registry port", args: []string{"--namespace", "ops", "--image", "localhost:5000/so:1.2"},
			want: []string{"namespace: ops", "image: localhost:5000/so:1.2", "name: ops"}},
		{name: "digest", args: []string{"--image", "example.com/so@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
			want: []string{"image: example.com/so@sha256:0123456789abcdef"}},
		{name: "cert-manager", args: []string{"--cert-mode", "cert-manager"},
			want: []string{"cert-manager.io/inject-ca-from: sidecar-operator-system/sidecar-operator-serving", "--cert-mode=cert-manager", "kind: Certificate", "secretName: sidecar-operator-serving"}},
		{name: "bad namespace", args: []string{"--namespace", "Not_A_Namespace"}, wantErrContains: `--namespace "Not_A_Namespace"`},
		{name: "bad cert mode", args: []string{"--cert-mode", "openssl"}, wantErrContains: "--cert-mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, append([]string{"manifests"}, tc.args...)...)
			if tc.wantErrContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrContains) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErrContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q", w)
				}
			}
		})
	}
}
