package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/controller/rollout"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/test/proc"
)

// rolloutPhase switches the agent to RollingUpdate with maxUnavailable and
// changes only its image, so that the operator upgrades every injected pod
// in place. The bench is the kubelet: it reports each upgraded container
// running and ready at its new image, which frees the rollout's slot. It
// reports the time until every pod carries the new revision, the operator's
// writes per upgraded pod and its peak RSS before and after.
func rolloutPhase(ctx context.Context, k8s client.WithWatch, agent *v1alpha1.Sidecar, metricsAddr string, pid int,
	maxUnavailable, image string, cpuProfile func() error,
) error {
	validated, err := podsValidated(ctx, k8s)
	if err != nil {
		return err
	}
	fmt.Printf("rollout: %s\n", validated)
	rssBefore, err := proc.PeakRSS(pid)
	if err != nil {
		return err
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.Limit(1)); err != nil {
		return err
	}
	k := &kubelet{k8s: k8s, sidecar: agent.Name, generation: map[types.UID]int64{}}
	kubeletCtx, stopKubelet := context.WithCancel(ctx)
	defer stopKubelet()
	kubeletDone := make(chan error, 1)
	go func() { kubeletDone <- k.run(kubeletCtx, pods.ResourceVersion) }()
	eventsBefore, err := upgradeEvents(ctx, k8s)
	if err != nil {
		return err
	}
	before, err := scrape(metricsAddr)
	if err != nil {
		return err
	}

	if err := k8s.Get(ctx, client.ObjectKeyFromObject(agent), agent); err != nil {
		return err
	}
	from := agent.Status.UpdateRevision
	agent.Spec.UpdateStrategy = &v1alpha1.SidecarUpdateStrategy{Type: v1alpha1.RollingUpdate, MaxUnavailable: new(intstr.FromString(maxUnavailable))}
	for i := range agent.Spec.Containers {
		agent.Spec.Containers[i].Image = image
	}
	for i := range agent.Spec.InitContainers {
		agent.Spec.InitContainers[i].Image = image
	}
	start := time.Now()
	if err := k8s.Update(ctx, agent); err != nil {
		return err
	}
	profiled := make(chan error, 1)
	go func() { profiled <- cpuProfile() }()
	to := inject.Revision(&agent.Spec)
	// Not an overall timeout, which a busy machine overruns at 10k: the
	// rollout fails when no pod reaches the new revision for 5 minutes.
	moved, progressed := int32(-1), time.Now()
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-kubeletDone:
			return false, fmt.Errorf("the bench's kubelet stopped: %w", err)
		default:
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(agent), agent); err != nil {
			return false, err
		}
		s := agent.Status
		for _, r := range s.Revisions {
			if r.Revision == to && r.Pods > moved {
				moved, progressed = r.Pods, time.Now()
			}
		}
		if time.Since(progressed) > 5*time.Minute {
			return false, errors.New("no pod reached the new revision for 5 minutes")
		}
		return s.ObservedGeneration == agent.Generation && s.UpdateRevision == to && s.CurrentRevision == to &&
			len(s.Revisions) == 1 && s.Revisions[0].Revision == to && s.Revisions[0].Pods == s.InjectedPods, nil
	})
	converged := time.Since(start)
	if err != nil {
		return fmt.Errorf("rollout not converged after %s: %w (status %+v)", converged.Round(time.Second), err, agent.Status)
	}
	time.Sleep(2 * time.Second) // the last Events
	after, err := scrape(metricsAddr)
	if err != nil {
		return err
	}
	rssAfter, err := proc.PeakRSS(pid)
	if err != nil {
		return err
	}
	eventsAfter, err := upgradeEvents(ctx, k8s)
	if err != nil {
		return err
	}
	stopKubelet()
	if err := <-kubeletDone; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if err := <-profiled; err != nil {
		return err
	}

	upgraded := after["inplace_ok"] - before["inplace_ok"]
	phase := metricValues{}
	for _, key := range append(writeMethods, "PUT 409") {
		phase[key] = after[key] - before[key]
	}
	podWrites := k.podWrites()
	events := eventsAfter - eventsBefore
	fmt.Printf("rollout: the bench acts as the kubelet: for each pod whose injected container's image changed, " +
		"it sets that container's status to the new image, running and ready\n")
	fmt.Printf("rollout: %s from revision %s to %s (image %s), RollingUpdate maxUnavailable %s: %d/%d pods at the new revision "+
		"(currentRevision == updateRevision) in %s\n", agent.Name, from, to, image, maxUnavailable,
		agent.Status.Revisions[0].Pods, agent.Status.InjectedPods, converged.Round(100*time.Millisecond))
	fmt.Printf("rollout: %.0f pods upgraded in place; write requests sent: %s; %d pod updates (%.2f per pod, %.0f conflicts), "+
		"%d UpgradedInPlace Events (%.2f per pod), the rest the Sidecar's status and the leader lease\n",
		upgraded, phase.writes(), podWrites, float64(podWrites)/upgraded, phase["PUT 409"], events, float64(events)/upgraded)
	fmt.Printf("rollout: the bench's kubelet wrote %d pod statuses\n", k.statusWrites.Load())
	fmt.Printf("rollout: peak RSS %d MiB before, %d MiB after\n", rssBefore>>20, rssAfter>>20)
	return nil
}

// podsValidated says whether a ValidatingWebhookConfiguration sends pod
// updates to the operator's /validate-pods: the bench's control plane is
// bare, so the operator's in-place updates are then not validated.
func podsValidated(ctx context.Context, k8s client.Client) (string, error) {
	var configs admissionv1.ValidatingWebhookConfigurationList
	if err := k8s.List(ctx, &configs); err != nil {
		return "", err
	}
	var policies admissionv1.ValidatingAdmissionPolicyList
	if err := k8s.List(ctx, &policies); err != nil {
		return "", err
	}
	names := make([]string, 0, len(policies.Items))
	for _, p := range policies.Items {
		names = append(names, p.Name)
	}
	vaps := fmt.Sprintf("ValidatingAdmissionPolicies: [%s]", strings.Join(names, " "))
	for _, c := range configs.Items {
		for _, w := range c.Webhooks {
			if s := w.ClientConfig.Service; s != nil && s.Path != nil && *s.Path == "/validate-pods" ||
				w.ClientConfig.URL != nil && strings.HasSuffix(*w.ClientConfig.URL, "/validate-pods") {
				return fmt.Sprintf("the operator's ValidatingWebhookConfiguration %s sends pod updates to /validate-pods "+
					"(webhook %s, failurePolicy %s), so the in-place updates are validated; %s",
					c.Name, w.Name, *w.FailurePolicy, vaps), nil
			}
		}
	}
	return fmt.Sprintf("no ValidatingWebhookConfiguration points at /validate-pods, so the in-place updates are not validated; %s", vaps), nil
}

// upgradeEvents counts the rollout's UpgradedInPlace Events.
func upgradeEvents(ctx context.Context, k8s client.Client) (int, error) {
	n := 0
	opts := &client.ListOptions{Limit: 5000}
	for {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, opts); err != nil {
			return 0, err
		}
		for _, e := range list.Items {
			if e.Reason == rollout.ReasonUpgradedInPlace {
				n++
			}
		}
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}

// kubelet stands in for the kubelets the bench has none of: when a pod's
// injected container runs another image in its spec than in its status,
// it reports the container running and ready at the spec's image.
type kubelet struct {
	k8s          client.WithWatch
	sidecar      string
	statusWrites atomic.Int64

	mu sync.Mutex
	// generation is the latest seen of each pod that moved past its first:
	// each spec update of a pod increments it.
	generation map[types.UID]int64
}

func (k *kubelet) run(ctx context.Context, resourceVersion string) error {
	todo := make(chan *corev1.Pod, 1024)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 16 {
		wg.Go(func() {
			for pod := range todo {
				if err := k.report(ctx, pod); err != nil && ctx.Err() == nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	defer func() { close(todo); wg.Wait() }()
	for {
		w, err := k.k8s.Watch(ctx, &corev1.PodList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})
		if err != nil {
			return err
		}
		for e := range w.ResultChan() {
			if e.Type == watch.Error {
				w.Stop()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return apierrors.FromObject(e.Object)
			}
			pod, ok := e.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			resourceVersion = pod.ResourceVersion
			if e.Type != watch.Modified {
				continue
			}
			k.mu.Lock()
			if pod.Generation > max(k.generation[pod.UID], 1) {
				k.generation[pod.UID] = pod.Generation
			}
			k.mu.Unlock()
			if len(k.stale(pod)) > 0 {
				select {
				case todo <- pod:
				case err := <-errs:
					w.Stop()
					return err
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// stale returns the injected containers whose status does not report the
// spec's image ready.
func (k *kubelet) stale(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for _, rec := range inject.InjectedSidecars(pod.Annotations) {
		if rec.Name != k.sidecar {
			continue
		}
		for _, name := range rec.Containers {
			c, st := containerOf(pod, name)
			if c != nil && (st == nil || st.Image != c.Image || !st.Ready) {
				out = append(out, c)
			}
		}
	}
	return out
}

// report writes the stale containers' statuses, reading the pod again
// after a conflict.
func (k *kubelet) report(ctx context.Context, pod *corev1.Pod) error {
	for {
		stale := k.stale(pod)
		if len(stale) == 0 {
			return nil
		}
		for _, c := range stale {
			st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: new(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
			list := &pod.Status.ContainerStatuses
			if slices.ContainsFunc(pod.Spec.InitContainers, func(i corev1.Container) bool { return i.Name == c.Name }) {
				list = &pod.Status.InitContainerStatuses
			}
			setStatus(list, st)
		}
		err := k.k8s.Status().Update(ctx, pod)
		if err == nil {
			k.statusWrites.Add(1)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return client.IgnoreNotFound(err)
		}
		if err := k.k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
}

// podWrites counts the updates of pods' specs seen, by their generations.
func (k *kubelet) podWrites() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var n int64
	for _, g := range k.generation {
		n += g - 1
	}
	return n
}

func containerOf(pod *corev1.Pod, name string) (*corev1.Container, *corev1.ContainerStatus) {
	var c *corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				c = &list[i]
			}
		}
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return c, &list[i]
			}
		}
	}
	return c, nil
}

func setStatus(list *[]corev1.ContainerStatus, st corev1.ContainerStatus) {
	for i := range *list {
		if (*list)[i].Name == st.Name {
			(*list)[i] = st
			return
		}
	}
	*list = append(*list, st)
}
