package diagnose

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// The probe against controller-runtime's fake client: what it sends, what it
// finds, the notes, and that the workload probe deletes what it created. (A
// real controller-manager and webhook are in test/integration.)
func TestProbe(t *testing.T) {
	const name = "sidecar-operator-verify-x7k2p"
	labelled := metav1.ObjectMeta{Namespace: "shop", Labels: map[string]string{v1alpha1.LabelVerify: name}}
	failedSet := &appsv1.ReplicaSet{ObjectMeta: labelled, Status: appsv1.ReplicaSetStatus{Conditions: []appsv1.ReplicaSetCondition{{
		Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: errUnknownAuthority,
	}}}}
	failedSet.Name = name + "-5d8f7c9b6"
	pod := &corev1.Pod{ObjectMeta: labelled}
	pod.Name = name + "-5d8f7c9b6-4q9zt"
	// observing is a controller-manager: it observes every Deployment.
	observing := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		err := c.Get(ctx, key, obj, opts...)
		if d, ok := obj.(*appsv1.Deployment); ok && err == nil {
			d.Status.ObservedGeneration = 1
		}
		return err
	}}
	refusing := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*corev1.Pod); ok {
			return internal(errRefused)
		}
		return c.Create(ctx, obj, opts...)
	}}

	cases := []struct {
		name        string
		workload    bool
		objects     []client.Object
		funcs       interceptor.Funcs
		wantStored  string // name; "-" for a dry-run pod
		wantErr     string
		wantNotes   []string
		wantRunFail bool
	}{
		{name: "dry run", wantStored: "-"},
		{name: "dry run refused", funcs: refusing, wantErr: errRefused},
		{name: "workload without a controller-manager", workload: true, wantStored: "-",
			wantNotes: []string{"created Deployment and Service shop/" + name, "no controller-manager observed the Deployment within 300ms", "deleted the Deployment"}},
		{name: "workload without a controller-manager, dry run refused", workload: true, funcs: refusing, wantErr: errRefused,
			wantNotes: []string{"created", "no controller-manager", "deleted"}},
		{name: "workload: the Deployment's pod", workload: true, funcs: observing, objects: []client.Object{pod}, wantStored: pod.Name,
			wantNotes: []string{"created", "deleted"}},
		{name: "workload: the ReplicaSet cannot create its pod", workload: true, funcs: observing, objects: []client.Object{failedSet}, wantErr: errUnknownAuthority,
			wantNotes: []string{"created", "deleted"}},
		{name: "workload: no pod in time", workload: true, funcs: observing, wantRunFail: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			objects := append([]client.Object{}, tc.objects...)
			for i := range objects {
				objects[i] = objects[i].DeepCopyObject().(client.Object)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).WithInterceptorFuncs(tc.funcs).Build()
			test := TestPod{Name: name, Sidecars: []string{"logger"}, OptIn: true, Image: "pause"}
			p := Probe{Namespace: "shop", Name: name, Template: test.Template(nil), Workload: tc.workload, Timeout: 600 * time.Millisecond, ControllerWait: 300 * time.Millisecond}
			a, err := p.Run(context.Background(), c)
			if tc.wantRunFail != (err != nil) {
				t.Fatalf("Run: %v", err)
			}
			if a.Sent == nil || a.Sent.Namespace != "shop" || a.Sent.Annotations[v1alpha1.AnnotationInject] != "logger" {
				t.Errorf("sent %+v", a.Sent)
			}
			if !tc.wantRunFail {
				switch {
				case tc.wantStored == "" && a.Stored != nil:
					t.Errorf("stored %s", a.Stored.Name)
				case tc.wantStored == "-" && (a.Stored == nil || a.Stored.GenerateName != name+"-" || a.Stored.Namespace != "shop"):
					t.Errorf("stored %+v, want the dry-run pod", a.Stored)
				case tc.wantStored != "" && tc.wantStored != "-" && (a.Stored == nil || a.Stored.Name != tc.wantStored):
					t.Errorf("stored %+v, want %s", a.Stored, tc.wantStored)
				}
				if (a.Err == nil) != (tc.wantErr == "") || a.Err != nil && a.Err.Error() != tc.wantErr {
					t.Errorf("err %v, want %q", a.Err, tc.wantErr)
				}
			}
			if len(a.Notes) != len(tc.wantNotes) && !tc.wantRunFail {
				t.Errorf("notes %q, want %q", a.Notes, tc.wantNotes)
			}
			for i, want := range tc.wantNotes {
				if i < len(a.Notes) && !strings.HasPrefix(a.Notes[i], want) {
					t.Errorf("note %d %q, want %q", i, a.Notes[i], want)
				}
			}
			if tc.workload && !slices.ContainsFunc(a.Notes, func(n string) bool { return strings.HasPrefix(n, "deleted") }) {
				t.Errorf("notes %q: nothing deleted", a.Notes)
			}
			for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &appsv1.ReplicaSetList{}, &corev1.PodList{}, &corev1.ServiceList{}} {
				if err := c.List(context.Background(), list, client.InNamespace("shop")); err != nil {
					t.Fatal(err)
				}
				if n := meta.LenList(list); n != 0 {
					t.Errorf("%T: %d left", list, n)
				}
			}
			if tc.wantRunFail && !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "waiting") {
				t.Errorf("Run: %v", err)
			}
		})
	}
}
