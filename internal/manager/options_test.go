package manager

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string
		check   func(*testing.T, *Options)
	}{
		{
			name: "outside a cluster: the URL from the address, on loopback",
			opts: Options{WebhookAddr: ":9443"},
			check: func(t *testing.T, o *Options) {
				if o.Target.URL != "https://127.0.0.1:9443" || !slices.Equal(o.WebhookHosts, []string{"127.0.0.1", "localhost"}) ||
					o.Namespace != DefaultNamespace || !o.CreateNamespace || o.CertMode != CertModeSelf || o.FailurePolicy != webhookconfig.DefaultFailurePolicy ||
					!slices.Equal(o.PullSecretNamespaces, []string{DefaultNamespace}) || o.ValidatingConfigName != webhookconfig.DefaultName {
					t.Errorf("%+v", o)
				}
			},
		},
		{
			name: "in a cluster: the Service in the pod's namespace",
			opts: Options{InCluster: true, PodNamespace: "ops", ServiceName: "so", WebhookAddr: ":9443"},
			check: func(t *testing.T, o *Options) {
				if o.Target != (webhookconfig.Target{ServiceNamespace: "ops", ServiceName: "so"}) || o.Namespace != "ops" || o.CreateNamespace ||
					!slices.Contains(o.WebhookHosts, "so.ops.svc") {
					t.Errorf("%+v", o)
				}
			},
		},
		{name: "in a cluster without a namespace", opts: Options{InCluster: true}, wantErr: "POD_NAMESPACE"},
		{name: "a URL that is not https", opts: Options{WebhookURL: "http://x:1"}, wantErr: "--webhook-url"},
		{name: "a bad address", opts: Options{WebhookAddr: "nope"}, wantErr: "--webhook-addr"},
		{name: "a failure policy", opts: Options{WebhookAddr: ":1", FailurePolicy: "Sometimes"}, wantErr: "--failure-policy"},
		{name: "a cert mode", opts: Options{WebhookAddr: ":1", CertMode: "magic"}, wantErr: "--cert-mode"},
		{name: "files without files", opts: Options{WebhookAddr: ":1", CertMode: CertModeFiles}, wantErr: "--tls-cert-file"},
		{name: "a lease the grant policy refuses", opts: Options{WebhookAddr: ":1", LeaseDuration: time.Hour}, wantErr: "--leader-elect-lease-duration"},
		{name: "a component", opts: Options{WebhookAddr: ":1", Component: "both"}, wantErr: "--component"},
		{
			name: "the webhook elects no leader",
			opts: Options{WebhookAddr: ":1", Component: ComponentWebhook, LeaderElection: true},
			check: func(t *testing.T, o *Options) {
				if o.LeaderElection || !o.Component.Serves() || o.Component.Controls() {
					t.Errorf("%+v", o)
				}
			},
		},
		{name: "self with files", opts: Options{WebhookAddr: ":1", TLSCertFile: "c"}, wantErr: "--tls-cert-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			err := o.Complete()
			if err == nil {
				err = o.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, &o)
		})
	}
}
