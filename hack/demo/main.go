// Command demo drives `make demo`: it installs the CRD, applies the example
// Sidecars and workload pod through the API, and prints the injected pod.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/yaml"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rbac"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
)

func main() {
	step := flag.String("step", "", "crds: install the CRD and wait until it is served; apply: apply the examples and show the pod")
	flag.Parse()
	if err := run(*step); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// run reads the cluster from --kubeconfig or $KUBECONFIG, as controller-runtime does.
func run(step string) error {
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	sch := scheme.New()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch step {
	case "crds":
		return installCRDs(ctx, c)
	case "apply":
		return applyExamples(ctx, c)
	}
	return fmt.Errorf("-step: want crds or apply, got %q", step)
}

func installCRDs(ctx context.Context, c client.Client) error {
	files, err := filepath.Glob("config/crd/bases/*.yaml")
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs under config/crd/bases (run from the repository root)")
	}
	for _, f := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := readYAML(f, &crd); err != nil {
			return err
		}
		if err := createOrUpdate(ctx, c, &crd); err != nil {
			return err
		}
		fmt.Printf("crd %s applied\n", crd.Name)
		for {
			var got apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKeyFromObject(&crd), &got); err != nil {
				return err
			}
			if established(&got) {
				break
			}
			if err := sleep(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func applyExamples(ctx context.Context, c client.Client) error {
	scs, err := sidecarfile.Load("examples")
	if err != nil {
		return err
	}
	for i := range scs {
		if err := createOrUpdate(ctx, c, &scs[i]); err != nil {
			return err
		}
		fmt.Printf("sidecar %s applied\n", scs[i].Name)
	}
	var pod corev1.Pod
	if err := readYAML("examples/workloads/pod.yaml", &pod); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := c.Delete(ctx, &pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// The operator picks Sidecars up from its cache: retry until both inject.
	for {
		p := pod.DeepCopy()
		err := c.Create(ctx, p, client.DryRunAll)
		if err == nil && strings.Count(p.Annotations["sidecar-operator.io/status"], `"name"`) == len(scs) {
			break
		}
		if serr := sleep(ctx); serr != nil {
			if err != nil { // the last answer says why, e.g. a denial
				return fmt.Errorf("the webhook did not inject the examples in time: %w", err)
			}
			return errors.New("the webhook did not inject the examples in time")
		}
	}
	if err := c.Create(ctx, &pod); err != nil {
		return err
	}
	var stored corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&pod), &stored); err != nil {
		return err
	}
	fmt.Printf("\npod %s/%s as stored by the apiserver:\n", stored.Namespace, stored.Name)
	spec := map[string]any{"containers": stored.Spec.Containers, "volumes": stored.Spec.Volumes}
	if len(stored.Spec.InitContainers) > 0 {
		spec["initContainers"] = stored.Spec.InitContainers
	}
	show := map[string]any{
		"metadata": map[string]any{"labels": stored.Labels, "annotations": stored.Annotations},
		"spec":     spec,
	}
	out, err := yaml.Marshal(show)
	if err != nil {
		return err
	}
	fmt.Print(string(out))
	return showGrants(ctx, c, &stored)
}

// showGrants waits for the RBAC the xxl-agent asks for and for the Sidecars'
// status, and prints them: the grant covers only the pod's own namespace.
func showGrants(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	var binding rbacv1.RoleBinding
	key := client.ObjectKey{Namespace: pod.Namespace, Name: rbac.RoleName("xxl-agent")}
	for c.Get(ctx, key, &binding) != nil {
		if err := sleep(ctx); err != nil {
			return errors.New("the operator did not bind the xxl-agent's rules in time")
		}
	}
	fmt.Printf("\nRoleBinding %s/%s grants ClusterRole %s to:\n", binding.Namespace, binding.Name, binding.RoleRef.Name)
	for _, s := range binding.Subjects {
		fmt.Printf("  %s %s/%s\n", s.Kind, s.Namespace, s.Name)
	}
	var list v1alpha1.SidecarList
	for {
		if err := c.List(ctx, &list); err != nil {
			return err
		}
		if !slices.ContainsFunc(list.Items, func(sc v1alpha1.Sidecar) bool { return sc.Status.InjectedPods == 0 }) {
			break
		}
		if err := sleep(ctx); err != nil {
			return errors.New("the Sidecars' status did not count the pod in time")
		}
	}
	fmt.Printf("\n%-12s %8s %9s %9s %7s %11s\n", "SIDECAR", "MATCHED", "INJECTED", "OUTDATED", "MISSED", "UNVERIFIED")
	for _, sc := range list.Items {
		st := sc.Status
		fmt.Printf("%-12s %8d %9d %9d %7d %11d\n", sc.Name, st.MatchedPods, st.InjectedPods, st.OutdatedPods, st.MissedPods, st.UnverifiedPods)
	}
	return nil
}

func createOrUpdate(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return err
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	return c.Update(ctx, obj)
}

func readYAML(path string, into runtime.Object) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func sleep(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}
