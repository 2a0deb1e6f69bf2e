package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/cli"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/webhookconfig"
)

// commandProcessEnv holds, in a child process of the suite, the arguments
// of the sidecar-operator command it is to run.
const commandProcessEnv = "SIDECAR_OPERATOR_TEST_COMMAND"

// runCommandProcess runs a sidecar-operator command until it ends or is killed.
func runCommandProcess(args string) int {
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	root := cli.NewRootCommand()
	root.SetArgs(argv)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sidecar-operator:", err)
		return 1
	}
	return 0
}

// TestHelmChartInstallsAnOperatorThatInjects installs the chart with the Helm
// SDK, the default values, into a control plane of its own: in the suite's,
// the suite's operator holds the webhook configurations the chart names.
// With no kubelet the chart's Deployments never run, so the test runs `run`
// with each installed Deployment's arguments, the webhook's and the
// controllers', each as its ServiceAccount (a token from the TokenRequest
// API): the chart's RBAC is all each has. Only
// what a pod outside the cluster must change is changed: the kubeconfig, the
// namespace (the downward API's), and loopback addresses, the webhook's
// registered by URL as `run` does outside a cluster. A pod that a Sidecar
// selects comes back injected. helm uninstall then removes every object of
// the chart but the CRD, the author policy that judges its Sidecars and the
// grant policy, which it keeps.
func TestHelmChartInstallsAnOperatorThatInjects(t *testing.T) {
	const namespace, release = "so-helm", "sidecar-operator"
	ctx := context.Background()
	env := &envtest.Environment{}
	envCfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	adminKubeconfig, err := writeKubeconfig(env)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(adminKubeconfig)
	c, err := client.New(envCfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}

	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = new(adminKubeconfig), new(namespace)
	helm := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	if err := helm.Init(flags, namespace, "secret"); err != nil {
		t.Fatal(err)
	}
	chart, err := loader.Load(filepath.Join("..", "..", "charts", "sidecar-operator"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(helm)
	install.ReleaseName, install.Namespace, install.CreateNamespace = release, namespace, true
	install.WaitStrategy, install.Timeout = kube.HookOnlyStrategy, time.Minute // no node: nothing gets ready
	installed, err := install.RunWithContext(ctx, chart, nil)
	if err != nil {
		t.Fatal(err)
	}
	objects := decodeObjects(t, []byte(installed.(*releasev1.Release).Manifest))
	kinds := map[string]int{}
	for _, obj := range objects {
		kinds[obj.GetKind()]++
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopy()); err != nil {
			t.Errorf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	for _, kind := range []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
		"Service", "PodDisruptionBudget", "NetworkPolicy", "ResourceQuota", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if kinds[kind] == 0 {
			t.Errorf("the release has no %s: %v", kind, kinds)
		}
	}

	stopOperator := runAsServiceAccount(t, c, envCfg.Host, envCfg.CAData, namespace)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "helm-app"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, exampleSidecars(t)["fluentd"]); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns.Name, Labels: map[string]string{"logging": "fluentd"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	// The Sidecar reaches the webhook's cache through a watch: until then,
	// dry runs.
	eventually(t, 20*time.Second, func() error {
		dry := pod.DeepCopy()
		if err := c.Create(ctx, dry, client.DryRunAll); err != nil {
			return err
		}
		if !strings.Contains(dry.Annotations[v1alpha1.AnnotationStatus], "fluentd") {
			return fmt.Errorf("pod not injected yet")
		}
		return nil
	})
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if names := append(containerNames(pod.Spec.InitContainers), containerNames(pod.Spec.Containers)...); !slices.Contains(names, "fluentd") {
		t.Errorf("pod's containers %v, want fluentd among them", names)
	}

	stopOperator() // first: it would create its configurations again
	uninstall := action.NewUninstall(helm)
	uninstall.WaitStrategy, uninstall.Timeout = kube.HookOnlyStrategy, time.Minute
	if _, err := uninstall.Run(release); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopy())
		switch {
		case obj.GetKind() == "CustomResourceDefinition":
			if err != nil {
				t.Errorf("helm uninstall removed the CRD, and every Sidecar with it: %v", err)
			}
		case strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") && obj.GetName() == webhookconfig.MandatoryPolicyName:
			// It denies pods the webhook gone would no longer inject: it goes with it.
			if !apierrors.IsNotFound(err) {
				t.Errorf("helm uninstall kept the %s %s, which would deny every pod a mandatory Sidecar selects: %v", obj.GetKind(), obj.GetName(), err)
			}
		case strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy"):
			if err != nil {
				t.Errorf("helm uninstall removed the %s %s, which it keeps (the author policy judges the Sidecars it keeps; the grant policy outlives the RBAC it guards): %v",
					obj.GetKind(), obj.GetName(), err)
			}
		case !apierrors.IsNotFound(err):
			t.Errorf("%s %s after helm uninstall: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// runAsServiceAccount starts the installed controllers, then the webhook,
// each as runDeployment does, the webhook's address given to both: the
// controllers register it. It returns what kills both.
func runAsServiceAccount(t *testing.T, c client.Client, host string, caData []byte, namespace string) (stop func()) {
	t.Helper()
	webhookAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// What stands in for the Service: the installed configurations sent to
	// the webhook's address, as an admin would point them. The grant policy
	// lets the controllers' identity change no webhook's destination.
	target := webhookconfig.Target{URL: "https://" + webhookAddr}
	mutating := webhookconfig.Mutating(webhookconfig.DefaultName, target, nil, admissionv1.Fail, webhookconfig.AllNamespaces, namespace)
	validating := webhookconfig.Validating(webhookconfig.DefaultName, target, nil, namespace)
	for _, obj := range []client.Object{mutating, validating} {
		live := obj.DeepCopyObject().(client.Object)
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), live); err != nil {
			t.Fatal(err)
		}
		obj.SetResourceVersion(live.GetResourceVersion())
		obj.SetAnnotations(live.GetAnnotations())
		obj.SetLabels(live.GetLabels())
		if err := c.Update(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	stopControllers := runDeployment(t, c, host, caData, namespace, "sidecar-operator-controller", webhookAddr)
	stopWebhook := runDeployment(t, c, host, caData, namespace, "sidecar-operator", webhookAddr)
	return func() {
		stopWebhook()
		stopControllers()
	}
}

// runDeployment starts `run` in a child process with the arguments of the
// installed Deployment name, as its ServiceAccount, and waits until it is
// ready. It returns what kills it, which the test's cleanup calls too.
func runDeployment(t *testing.T, c client.Client, host string, caData []byte, namespace, name, webhookAddr string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: d.Spec.Template.Spec.ServiceAccountName}}
	token := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := c.SubResource("token").Create(ctx, sa, token); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"envtest": {Server: host, CertificateAuthorityData: caData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{sa.Name: {Token: token.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{sa.Name: {Cluster: "envtest", AuthInfo: sa.Name}},
		CurrentContext: sa.Name,
	}, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, container := range d.Spec.Template.Spec.Containers {
		if container.Name == "manager" {
			args = container.Args
		}
	}
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("the Deployment's manager runs %v", args)
	}
	addrs := []string{webhookAddr, "", ""}
	for i := 1; i < len(addrs); i++ {
		if addrs[i], err = freeAddr(); err != nil {
			t.Fatal(err)
		}
	}
	// Later flags win.
	args = append(args, "--kubeconfig="+kubeconfig, "--namespace="+namespace, "--zap-log-level="+zapLevel().String(),
		"--webhook-addr="+addrs[0], "--metrics-bind-address="+addrs[1], "--health-probe-bind-address="+addrs[2])
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), commandProcessEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	exited := make(chan struct{})
	go func() { exitErr = cmd.Wait(); close(exited) }()
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	t.Cleanup(stop)
	ready := make(chan error, 1)
	go func() { ready <- waitReady("http://" + addrs[2]) }()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-exited:
		t.Fatalf("sidecar-operator run exited: %v", exitErr)
	}
	return stop
}
