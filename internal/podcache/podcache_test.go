package podcache

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

func TestSlimPodKeepsWhatTheEngineReads(t *testing.T) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "log"}, Spec: v1alpha1.SidecarSpec{
		Containers:      []corev1.Container{{Name: "log", Image: "log"}},
		Volumes:         []corev1.Volume{{Name: "varlog", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		AppVolumeMounts: []corev1.VolumeMount{{Name: "varlog", MountPath: "/var/log"}},
		Selector:        &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
	}}
	engine, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		t.Fatal(err)
	}
	full := func(mountPath string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "x"},
				Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: "{...}"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: corev1.PodSpec{
				ServiceAccountName: "sa",
				Containers: []corev1.Container{{Name: "app", Image: "app", Command: []string{"run"},
					Env: []corev1.EnvVar{{Name: "A", Value: "1"}}, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: mountPath}}}},
				Volumes: []corev1.Volume{{Name: "data"}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Message: "running"},
		}
	}
	for _, mountPath := range []string{"/data", "/var/log"} { // the second conflicts: nothing pending
		pod := full(mountPath)
		obj, err := Slim(pod.DeepCopy()) // slims in place
		if err != nil {
			t.Fatal(err)
		}
		slim := obj.(*Pod).Pod()
		if got, want := engine.Pending(slim, inject.DefaultNamespaceLabels), engine.Pending(pod, inject.DefaultNamespaceLabels); !slices.Equal(got, want) {
			t.Errorf("mount %s: pending on the slim pod %v, on the full pod %v", mountPath, got, want)
		}
		if slim.Spec.Containers[0].Env != nil || slim.ManagedFields != nil || slim.Annotations[corev1.LastAppliedConfigAnnotation] != "" ||
			slim.Status.Message != "" || slim.Spec.ServiceAccountName != "sa" || slim.Status.Phase != corev1.PodRunning {
			t.Errorf("slim pod %+v", slim)
		}
		// The watch list transforms each pod twice.
		if again, _ := Slim(obj); again != obj {
			t.Errorf("slimming again changed the pod: %+v", again)
		}
		if again, _ := Slim(slim.DeepCopy()); !equality.Semantic.DeepEqual(again.(*Pod).Pod(), slim) {
			t.Errorf("slimming the slim pod changed it: %+v", again)
		}
		if cp := obj.(*Pod).DeepCopyObject().(*Pod); !equality.Semantic.DeepEqual(cp, obj) || &cp.Containers[0] == &obj.(*Pod).Containers[0] {
			t.Errorf("deep copy %+v", cp)
		}
	}
}

// A record verifies, or not, alike on the pod and on its slim copy, for
// each thing verification reads beside the injected containers.
func TestSlimPodVerifiesAsThePod(t *testing.T) {
	sc := v1alpha1.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "uid"}, Spec: v1alpha1.SidecarSpec{
		Containers: []corev1.Container{{Name: "agent", Image: "agent:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: "/var/run/agent"}, {Name: "work", MountPath: "/work"}}}},
		Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "admin"}}},
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		AllowRequestByName: new(true),
	}}
	engine, err := inject.New([]v1alpha1.Sidecar{sc})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseRing(map[string][]byte{"k1700000000": bytes.Repeat([]byte{1}, signing.KeySize)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationInject: "agent"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	res, err := engine.Inject(pod, "ns", inject.DefaultNamespaceLabels, ring)
	if err != nil || res.Pod == nil {
		t.Fatalf("inject: %v", err)
	}
	work := corev1.VolumeMount{Name: "work", MountPath: "/x"}
	for name, change := range map[string]func(*corev1.Pod){
		"as injected":           func(*corev1.Pod) {},
		"shareProcessNamespace": func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = new(true) },
		"hostPID":               func(p *corev1.Pod) { p.Spec.HostPID = true },
		"hostIPC":               func(p *corev1.Pod) { p.Spec.HostIPC = true },
		"the app mounts its work volume": func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, work)
		},
		"the app reads its work volume as a device": func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "work", DevicePath: "/dev/x"}}
		},
		"the app reads a file of its work volume into env": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "work", Path: "x", Key: "x"}}}}
		},
		"an ephemeral container mounts its work volume": func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", VolumeMounts: []corev1.VolumeMount{work}}}}
		},
	} {
		full := res.Pod.DeepCopy()
		change(full)
		obj, err := Slim(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		rec := inject.InjectedSidecars(full.Annotations)[0]
		want, got := engine.Verify(ring, full, &rec), engine.Verify(ring, obj.(*Pod).Pod(), &rec)
		if (want == nil) != (got == nil) || (name == "as injected") != (want == nil) {
			t.Errorf("%s: on the pod %v, on the slim pod %v", name, want, got)
		}
	}
}

func TestSlimPodsShareEqualContainers(t *testing.T) {
	pod := func(name, image string) *corev1.Pod {
		status := `{"sidecars":[{"name":"log","revision":"r","containers":["log"]}]}`
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationStatus: status}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "app", Image: "app", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}},
				{Name: "log", Image: image, Env: []corev1.EnvVar{{Name: "A", Value: "1"}}, Ports: []corev1.ContainerPort{{ContainerPort: 80}}},
			}},
		}
	}
	slim := func(p *corev1.Pod) *corev1.Pod {
		obj, err := Slim(p)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*Pod).Pod()
	}
	a, b, c := slim(pod("a", "log:1")), slim(pod("b", "log:1")), slim(pod("c", "log:2"))
	if &a.Spec.Containers[0] != &b.Spec.Containers[0] {
		t.Error("equal containers are not shared")
	}
	if &a.Spec.Containers[0] == &c.Spec.Containers[0] || c.Spec.Containers[1].Image != "log:2" {
		t.Errorf("different containers are shared: %+v", c.Spec.Containers)
	}
	want := []corev1.Container{
		{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}},
		{Name: "log", Image: "log:1", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
	}
	if !equality.Semantic.DeepEqual(b.Spec.Containers, want) {
		t.Errorf("slim containers %+v, want %+v", b.Spec.Containers, want)
	}
}

func TestSlimPodsShareEqualLabels(t *testing.T) {
	pod := func(labels map[string]string) *corev1.Pod {
		obj, err := Slim(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*Pod).Pod()
	}
	given := map[string]string{"app": "x", "pod-template-hash": "1"}
	a, b := pod(given), pod(map[string]string{"pod-template-hash": "1", "app": "x"})
	c := pod(map[string]string{"app": "x", "pod-template-hash": "2"})
	d := pod(map[string]string{"app": "x1", "pod-template-hash": ""}) // the same bytes, split elsewhere
	if reflect.ValueOf(a.Labels).UnsafePointer() != reflect.ValueOf(b.Labels).UnsafePointer() {
		t.Error("equal labels are not shared")
	}
	if c.Labels["pod-template-hash"] != "2" || d.Labels["app"] != "x1" || reflect.ValueOf(a.Labels).UnsafePointer() == reflect.ValueOf(d.Labels).UnsafePointer() {
		t.Errorf("different labels are shared: %v %v", c.Labels, d.Labels)
	}
	given["app"] = "changed" // the shared map is a copy: the pod the apiserver sent is not it
	if a.Labels["app"] != "x" {
		t.Error("the shared map is the one the pod came with")
	}
}

// The informer keeps Pods, not corev1.Pods; its readers see corev1.Pods.
func TestCacheReadsSlimPodsAsPods(t *testing.T) {
	source := fcache.NewFakeControllerSource()
	// As controller-runtime makes it.
	informer := toolscache.NewSharedIndexInformer(source, &corev1.Pod{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := informer.SetTransform(Slim); err != nil {
		t.Fatal(err)
	}
	if err := informer.AddIndexers(toolscache.Indexers{IndexInjectedSidecars: func(obj any) ([]string, error) {
		return InjectedSidecarNames(obj.(*Pod)), nil
	}}); err != nil {
		t.Fatal(err)
	}
	status := `{"sidecars":[{"name":"log","revision":"r","containers":["log"]}]}`
	source.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "injected", Namespace: "ns", Annotations: map[string]string{v1alpha1.AnnotationStatus: status}},
		Spec: corev1.PodSpec{ServiceAccountName: "sa", Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "log", Image: "log:1"}}}})
	source.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "other"}})
	ctx := t.Context()
	go informer.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("not synced")
	}
	if _, ok := informer.GetStore().List()[0].(*Pod); !ok {
		t.Fatalf("the cache holds a %T", informer.GetStore().List()[0])
	}
	c := &Cache{informer: informer}
	var all []string
	for pod := range c.All {
		all = append(all, pod.Name)
	}
	slices.Sort(all)
	pods, err := c.InjectedWith("log")
	if err != nil {
		t.Fatal(err)
	}
	var injected []*corev1.Pod
	for pod := range pods {
		injected = append(injected, pod)
	}
	if !slices.Equal(all, []string{"injected", "plain"}) || len(injected) != 1 || injected[0].Name != "injected" ||
		injected[0].Spec.ServiceAccountName != "sa" || injected[0].Spec.Containers[1].Image != "log:1" {
		t.Errorf("all %v, injected with log %+v", all, injected)
	}
	inNamespace, err := c.Pods("other")
	if err != nil || len(inNamespace) != 1 || inNamespace[0].Name != "plain" {
		t.Errorf("pods in other: %+v, %v", inNamespace, err)
	}
	if everywhere, err := c.Pods(""); err != nil || len(everywhere) != 2 {
		t.Errorf("all pods: %+v, %v", everywhere, err)
	}
}
