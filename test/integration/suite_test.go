// Package integration proves the operator against a real kube-apiserver and
// etcd (envtest on the binaries hack/build-control-plane.sh builds): Sidecars
// and Pods go through the API, and the tests assert on what it stores.
package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/certrotation"
	"github.com/sidecar-operator/sidecar-operator/internal/manager"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

const (
	webhookConfigName = "sidecar-operator"
	operatorNamespace = "sidecar-operator-system"
	certSecret        = "sidecar-operator-certs"
)

var (
	cfg        *rest.Config
	k8s        client.Client
	webhookURL string
	// adminURL is the operator's metrics and admin port.
	adminURL string
	testEnv  *envtest.Environment
	// kubeconfig is a file for the commands under test, as a cluster admin.
	kubeconfig string
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(replicaProcessEnv); spec != "" {
		os.Exit(runReplicaProcess(spec)) // a child of TestHardKilledLeader
	}
	if args := os.Getenv(commandProcessEnv); args != "" {
		os.Exit(runCommandProcess(args)) // a child of TestHelmChartInstallsAnOperatorThatInjects
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with make test, which builds the control plane")
		return 1
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// MutatingAdmissionPolicies on, as a 1.34 or 1.35 cluster turns them on
	// (v1beta1); 1.36 and later serve them at v1 by default.
	testEnv.ControlPlane.GetAPIServer().Configure().
		Set("runtime-config", "admissionregistration.k8s.io/v1beta1=true").Set("feature-gates", "MutatingAdmissionPolicy=true")
	env := testEnv
	var err error
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		stopControllerManager() // before the apiserver it talks to
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	if kubeconfig, err = writeKubeconfig(env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.Remove(kubeconfig)
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	addr, err := freeAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	webhookURL = "https://" + addr
	adminAddr, err := freeAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	adminURL = "https://" + adminAddr
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		err := manager.Run(ctx, cfg, manager.Options{
			WebhookAddr:       addr,
			WebhookHosts:      []string{"127.0.0.1"},
			Namespace:         operatorNamespace,
			CreateNamespace:   true,
			CertSecret:        certSecret,
			Certificates:      certrotation.Options{PublishDelay: time.Second},
			LeaderElection:    true,
			SeveralInProcess:  true,
			DrainDelay:        time.Second,
			WebhookConfigName: webhookConfigName,
			Target:            webhookconfig.Target{URL: webhookURL},
			FailurePolicy:     admissionv1.Fail,
			MetricsAddr:       adminAddr,
			MetricsSecure:     true,
			PullSecretResync:  time.Second,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "operator stopped:", err)
		}
	})
	defer func() { cancel(); wg.Wait() }()
	if err := waitReady(webhookURL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := waitAuthorPolicy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// waitAuthorPolicy waits until the apiserver enforces the author policy
// the operator made, so that the tests of authors do not run before it
// judges them: a dry-run Sidecar granting secrets, by a user who may only
// write Sidecars, is refused by it.
func waitAuthorPolicy(ctx context.Context) error {
	const user = "author-policy-probe"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"sidecars"}, Verbs: []string{"create"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			return err
		}
		defer func() { _ = k8s.Delete(ctx, obj) }()
	}
	impersonated := rest.CopyConfig(cfg)
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: user}
	probe, err := client.New(impersonated, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		sc := &v1alpha1.Sidecar{
			ObjectMeta: metav1.ObjectMeta{Name: "author-policy-probe"},
			Spec: v1alpha1.SidecarSpec{
				Containers: []corev1.Container{{Name: "probe", Image: "probe"}},
				RBAC:       &v1alpha1.SidecarRBAC{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}},
			},
		}
		if last = probe.Create(ctx, sc, client.DryRunAll); last != nil && strings.Contains(last.Error(), webhookconfig.AuthorPolicyName) {
			return nil
		}
	}
	return fmt.Errorf("ValidatingAdmissionPolicy %s does not judge authors after a minute: %v", webhookconfig.AuthorPolicyName, last)
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE_LOGS") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady waits up to a minute for the operator at base to be ready.
func waitReady(base string) error {
	const timeout = time.Minute
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := c.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("operator not ready at %s after %s", base, timeout)
}
