package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/inventory"
)

// serviceAccountToken creates a ServiceAccount in ns and returns a token for it.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := k8s.SubResource("token").Create(ctx, sa, req); err != nil {
		t.Fatal(err)
	}
	return req.Status.Token
}

// grantViewer binds the shipped viewer ClusterRole to a ServiceAccount.
func grantViewer(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "viewer_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(raw, &role); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, &role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, &role) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, binding) })
}

func adminGet(t *testing.T, method, path, token string) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequest(method, adminURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// The admin port serves the inventory and fleet status to authorized users
// only, and the page renders them in a real browser.
func TestInventoryAPI(t *testing.T) {
	needControllerManager(t)
	ctx := context.Background()
	applySidecar(t, loggerSidecar("inv-logger", map[string]string{"inventory": "on"}))
	ns := createNamespace(t, map[string]string{"sidecar-operator.io/webhook": "enabled", "team": "shop"})
	if err := k8s.Create(ctx, deployment(ns, "shop", 1, map[string]string{"inventory": "on"})); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "shop"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	viewer := serviceAccountToken(t, ns, "viewer")
	nobody := serviceAccountToken(t, ns, "nobody")
	grantViewer(t, ns, "viewer")

	for _, tc := range []struct {
		name, method, token string
		want                int
	}{
		{"anonymous", http.MethodGet, "", http.StatusUnauthorized},
		{"not bound to the viewer role", http.MethodGet, nobody, http.StatusForbidden},
		{"a write, even by a viewer", http.MethodPost, viewer, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{inventory.PathInventory, inventory.PathSidecars, inventory.PathPage, "/metrics"} {
				if code, body := adminGet(t, tc.method, path, tc.token); code != tc.want {
					t.Errorf("%s %s: %d, want %d (%s)", tc.method, path, code, tc.want, body)
				}
			}
		})
	}

	var inv inventory.Inventory
	eventually(t, 60*time.Second, func() error {
		code, body := adminGet(t, http.MethodGet, inventory.PathInventory, viewer)
		if code != http.StatusOK {
			return fmt.Errorf("%d: %s", code, body)
		}
		if err := json.Unmarshal(body, &inv); err != nil {
			return err
		}
		for _, n := range inv.Namespaces {
			if n.Name == ns && len(n.Deployments) == 1 && len(n.Deployments[0].Sidecars) == 1 && n.Deployments[0].Sidecars[0].Current == 1 {
				return nil
			}
		}
		return fmt.Errorf("no injected Deployment shop in %s yet", ns)
	})
	for _, n := range inv.Namespaces {
		if n.Name != ns {
			continue
		}
		if !n.Webhook || n.InjectionLabels["sidecar-operator.io/webhook"] != "enabled" || n.InjectionLabels["team"] != "" {
			t.Errorf("namespace %s: webhook %v, injection labels %v", ns, n.Webhook, n.InjectionLabels)
		}
		if len(n.Services) != 1 || n.Services[0].Name != "shop" || strings.Join(n.Services[0].Ports, ",") != "80/TCP" {
			t.Errorf("services %+v", n.Services)
		}
		if want := (fleet.WorkloadSidecar{Name: "inv-logger", Current: 1}); n.Deployments[0].Sidecars[0] != want {
			t.Errorf("deployment carries %+v, want %+v", n.Deployments[0].Sidecars, want)
		}
	}
	code, body := adminGet(t, http.MethodGet, inventory.PathSidecars, viewer)
	var status clusterstate.Status
	if err := json.Unmarshal(body, &status); code != http.StatusOK || err != nil {
		t.Fatalf("%s: %d %v %s", inventory.PathSidecars, code, err, body)
	}
	found := false
	for _, row := range status.Sidecars {
		found = found || row.Name == "inv-logger" && row.Injected == 1
	}
	if !found {
		t.Errorf("%s lacks inv-logger with one injected pod: %+v", inventory.PathSidecars, status.Sidecars)
	}

	browse(t, viewer, ns)
}

// browse opens the page through `sidecar-operator dashboard` in headless
// Chromium, checks what it rendered and keeps a screenshot.
func browse(t *testing.T, token, ns string) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		t.Fatal("CHROMIUM is not set: make test installs Debian's chromium with hack/ensure-chromium.sh")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	out, w := io.Pipe()
	go func() {
		root := cli.NewRootCommand()
		root.SetOut(w)
		root.SetArgs([]string{"dashboard", "--url", adminURL, "--insecure-skip-tls-verify", "--token", token, "--listen", "127.0.0.1:0"})
		err := root.ExecuteContext(ctx)
		_ = w.Close()
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	}()
	// The page is only under the secret path the command prints.
	var page string
	lines := bufio.NewScanner(out)
	for page == "" && lines.Scan() {
		if line := strings.TrimSpace(lines.Text()); strings.HasPrefix(line, "http://") {
			page = line
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if page == "" {
		t.Fatal("dashboard printed no URL")
	}
	waitHTTP(t, page)

	artifacts, err := filepath.Abs(filepath.Join("..", "..", "bin", "test-artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	screenshot := filepath.Join(artifacts, "admin-page.png")
	run := func(args ...string) []byte {
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,900", "--virtual-time-budget=10000"}, args...)
		args = append(args, page)
		cmd := exec.Command(chromium, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium: %v\n%s", err, stderr.String())
		}
		return stdout.Bytes()
	}
	dom := string(run("--dump-dom"))
	for _, want := range []string{"<td>inv-logger</td>", "<td>Deployment " + ns + "/shop</td>", "inv-logger (current 1)", "shop ClusterIP"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if !strings.Contains(dom, `<p id="error" role="alert"></p>`) {
		t.Errorf("the page shows an error: %s", dom)
	}
	run("--screenshot=" + screenshot)
	png, err := os.ReadFile(screenshot)
	if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot at %s: %v", screenshot, err)
	}
	t.Logf("screenshot of the admin page: %s (%d bytes)", screenshot, len(png))
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}
