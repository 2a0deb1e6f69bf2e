package diagnose

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// TestPod describes the test pod: what a pod of the user's would carry.
type TestPod struct {
	// Name is the probe's name, the value of v1alpha1.LabelVerify.
	Name string
	// Sidecars are the Sidecars the pod should get.
	Sidecars    []string
	Labels      map[string]string
	Annotations map[string]string
	// OptIn names each of Sidecars on the pod or, for a Sidecar that may not
	// be requested by name and has an activation annotation, sets that.
	OptIn bool
	// Image is the image of the pod's one container.
	Image string
}

// Template is the test pod's template. existing are the Sidecars that exist,
// to know which may be requested by name.
func (t TestPod) Template(existing []v1alpha1.Sidecar) corev1.PodTemplateSpec {
	labels := map[string]string{v1alpha1.LabelVerify: t.Name}
	maps.Copy(labels, t.Labels)
	annotations := map[string]string{}
	maps.Copy(annotations, t.Annotations)
	if t.OptIn {
		var byName []string
		for _, name := range t.Sidecars {
			i := slices.IndexFunc(existing, func(s v1alpha1.Sidecar) bool { return s.Name == name })
			if i >= 0 && !existing[i].Spec.RequestByNameAllowed() && existing[i].Spec.Activation != nil {
				annotations[existing[i].Spec.Activation.Annotation] = "true"
				continue
			}
			byName = append(byName, name)
		}
		if len(byName) > 0 {
			annotations[v1alpha1.AnnotationInject] = strings.Join(byName, ",")
		}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: t.Image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

// podOf is a pod of the template, sharing nothing with it: a create decodes
// the apiserver's answer into its object, maps included.
func podOf(tmpl corev1.PodTemplateSpec) *corev1.Pod {
	t := tmpl.DeepCopy()
	return &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
}

// Probe sends the test pod to the apiserver.
type Probe struct {
	Namespace string
	// Name names the workload's objects, and prefixes the dry-run pod's.
	Name     string
	Template corev1.PodTemplateSpec
	// Workload creates a Deployment and a Service, as a real application
	// would, instead of a dry-run pod, and deletes them after.
	Workload bool
	// Timeout bounds the wait for the Deployment's pod.
	Timeout time.Duration
	// ControllerWait bounds the wait for a controller-manager to observe the
	// Deployment; without one the template is judged by dry run.
	ControllerWait time.Duration
}

// Run sends the test pod. A create the apiserver refuses is a finding, in
// Attempt.Err; the error is for a probe that could not run.
func (p Probe) Run(ctx context.Context, c client.Client) (Attempt, error) {
	a := Attempt{Sent: podOf(p.Template)}
	a.Sent.Namespace = p.Namespace
	if p.Workload {
		if err := p.runWorkload(ctx, c, &a); err != nil {
			return a, err
		}
	}
	if a.Stored == nil && a.Err == nil {
		pod := podOf(p.Template)
		pod.GenerateName, pod.Namespace = p.Name+"-", p.Namespace
		a.Err = c.Create(ctx, pod, client.DryRunAll)
		if a.Err == nil {
			a.Stored = pod
		}
	}
	return a, nil
}

// runWorkload creates a Deployment and a Service, waits for the pod, and
// deletes them. It sets a.Stored to the Deployment's pod, or a.Err to the
// error that kept it from being created, or neither when no
// controller-manager acted on the Deployment.
func (p Probe) runWorkload(ctx context.Context, c client.Client, a *Attempt) error {
	selector := map[string]string{v1alpha1.LabelVerify: p.Name}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: selector},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: *p.Template.DeepCopy(),
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: selector},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	cleanupCtx := context.WithoutCancel(ctx)
	defer p.cleanUp(cleanupCtx, c, &a.Notes)
	if err := c.Create(ctx, deploy); err != nil {
		return fmt.Errorf("creating Deployment %s/%s: %w", p.Namespace, p.Name, err)
	}
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating Service %s/%s: %w", p.Namespace, p.Name, err)
	}
	a.Notes = append(a.Notes, fmt.Sprintf("created Deployment and Service %s/%s", p.Namespace, p.Name))

	// A controller-manager shows itself by observing the Deployment.
	observed := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, p.ControllerWait, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(deploy), deploy)
		return err == nil && deploy.Status.ObservedGeneration > 0, client.IgnoreNotFound(err)
	})
	if observed != nil {
		a.Notes = append(a.Notes, fmt.Sprintf(
			"no controller-manager observed the Deployment within %s: judged its pod template by dry-run instead", p.ControllerWait))
		return nil
	}
	var pod *corev1.Pod
	var failure error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, p.Timeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(p.Namespace), client.MatchingLabels(selector)); err != nil {
			return false, err
		}
		if len(pods.Items) > 0 {
			pod = &pods.Items[0]
			return true, nil
		}
		// A ReplicaSet that cannot create its pod says why.
		var sets appsv1.ReplicaSetList
		if err := c.List(ctx, &sets, client.InNamespace(p.Namespace), client.MatchingLabels(selector)); err != nil {
			return false, err
		}
		for _, rs := range sets.Items {
			for _, cond := range rs.Status.Conditions {
				if cond.Type == appsv1.ReplicaSetReplicaFailure && cond.Status == corev1.ConditionTrue {
					failure = errors.New(cond.Message)
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting %s for the pod of Deployment %s/%s: %w", p.Timeout, p.Namespace, p.Name, err)
	}
	a.Stored, a.Err = pod, failure
	return nil
}

// cleanUp deletes what runWorkload created. It deletes the ReplicaSets and
// pods too, as a cluster without a garbage collector would keep them.
func (p Probe) cleanUp(ctx context.Context, c client.Client, notes *[]string) {
	selector := client.MatchingLabels{v1alpha1.LabelVerify: p.Name}
	in := client.InNamespace(p.Namespace)
	errs := make([]error, 0, 4)
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}},
	} {
		errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))))
	}
	errs = append(errs,
		client.IgnoreNotFound(c.DeleteAllOf(ctx, &appsv1.ReplicaSet{}, in, selector)),
		client.IgnoreNotFound(c.DeleteAllOf(ctx, &corev1.Pod{}, in, selector, client.GracePeriodSeconds(0))))
	if err := errors.Join(errs...); err != nil {
		*notes = append(*notes, fmt.Sprintf("cleaning up %s/%s failed, delete by label %s=%s: %v", p.Namespace, p.Name, v1alpha1.LabelVerify, p.Name, err))
		return
	}
	*notes = append(*notes, "deleted the Deployment, its ReplicaSets and pods, and the Service")
}
