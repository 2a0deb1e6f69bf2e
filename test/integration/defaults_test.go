package integration

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/signing"
)

// Every kind of volume source, as a Sidecar author might write it: without
// the fields the apiserver defaults.
func volumeSources() map[string]corev1.VolumeSource {
	ref := corev1.LocalObjectReference{Name: "x"}
	lun := int32(0)
	return map[string]corev1.VolumeSource{
		"HostPath":              {HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}},
		"EmptyDir":              {EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: new(resource.MustParse("1024Mi"))}},
		"GCEPersistentDisk":     {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "x"}},
		"AWSElasticBlockStore":  {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "x"}},
		"GitRepo":               {GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/x.git"}},
		"Secret":                {Secret: &corev1.SecretVolumeSource{SecretName: "x"}},
		"NFS":                   {NFS: &corev1.NFSVolumeSource{Server: "nfs.example.com", Path: "/x"}},
		"ISCSI":                 {ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:x", Lun: 0}},
		"Glusterfs":             {Glusterfs: &corev1.GlusterfsVolumeSource{EndpointsName: "x", Path: "x"}},
		"PersistentVolumeClaim": {PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}},
		"RBD":                   {RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"10.0.0.1:6789"}, RBDImage: "x"}},
		"FlexVolume":            {FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/x"}},
		"Cinder":                {Cinder: &corev1.CinderVolumeSource{VolumeID: "x"}},
		"CephFS":                {CephFS: &corev1.CephFSVolumeSource{Monitors: []string{"10.0.0.1:6789"}}},
		"Flocker":               {Flocker: &corev1.FlockerVolumeSource{DatasetName: "x"}},
		"DownwardAPI": {DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		"FC":                   {FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0982991b8dc5"}, Lun: &lun}},
		"AzureFile":            {AzureFile: &corev1.AzureFileVolumeSource{SecretName: "x", ShareName: "x"}},
		"ConfigMap":            {ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref}},
		"VsphereVolume":        {VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds] x.vmdk"}},
		"Quobyte":              {Quobyte: &corev1.QuobyteVolumeSource{Registry: "registry:7861", Volume: "x"}},
		"AzureDisk":            {AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "x", DataDiskURI: "https://example.com/x.vhd"}},
		"PhotonPersistentDisk": {PhotonPersistentDisk: &corev1.PhotonPersistentDiskVolumeSource{PdID: "x"}},
		"Projected": {Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: ref}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "a", Path: "a"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "ns", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "vault"}},
		}}},
		"PortworxVolume": {PortworxVolume: &corev1.PortworxVolumeSource{VolumeID: "x"}},
		"ScaleIO":        {ScaleIO: &corev1.ScaleIOVolumeSource{Gateway: "https://gw", System: "x", SecretRef: &ref, VolumeName: "x"}},
		"StorageOS":      {StorageOS: &corev1.StorageOSVolumeSource{VolumeName: "x"}},
		"CSI":            {CSI: &corev1.CSIVolumeSource{Driver: "csi.example.com"}},
		"Ephemeral": {Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}},
		"Image": {Image: &corev1.ImageVolumeSource{Reference: "registry.example.com/data:1"}},
	}
}

// sidecarLike has every field the container digest covers that the
// apiserver defaults somewhere inside.
func sidecarLike() corev1.Container {
	port := intstr.FromInt32(8080)
	return corev1.Container{
		Name: "sidecar", Image: "registry.example.com/agent:1", WorkingDir: "/work",
		Env:            []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		VolumeMounts:   []corev1.VolumeMount{{Name: "v", MountPath: "/v"}},
		LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: port}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090}}},
		StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}},
		Lifecycle: &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: port}},
			PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "1"}}},
		},
	}
}

// TestDefaultsMatchTheApiserver holds the digests to what a real apiserver
// stores: for every kind of volume the apiserver admits, and a container
// with every defaulted field the digest covers, the digests of a pod as
// written and as stored (a dry-run create) are equal. Without that, a
// Sidecar using such a volume or field would have records that never verify.
func TestDefaultsMatchTheApiserver(t *testing.T) {
	ctx := context.Background()
	sources := volumeSources()
	kinds := reflect.TypeFor[corev1.VolumeSource]()
	for f := range kinds.Fields() {
		if _, ok := sources[f.Name]; !ok {
			t.Errorf("no case for volume source %s: add one", f.Name)
		}
	}
	admitted := 0
	for kind, src := range sources {
		written := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "defaults-", Namespace: "default"},
			Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{sidecarLike()},
				Volumes: []corev1.Volume{{Name: "v", VolumeSource: src}}},
		}
		stored := written.DeepCopy()
		if err := k8s.Create(ctx, stored, client.DryRunAll); err != nil {
			t.Logf("%s: the apiserver refuses it, so no pod has it: %v", kind, err)
			continue
		}
		if droppedByTheApiserver(stored.Spec.Volumes) {
			t.Logf("%s: the apiserver drops it (stored %+v), so no pod has it", kind, stored.Spec.Volumes)
			continue
		}
		admitted++
		want, _ := signing.PodVolumeDigest(written, written.Spec.Containers)
		if got, _ := signing.PodVolumeDigest(stored, stored.Spec.Containers); got != want {
			t.Errorf("%s: the volume digest of the stored pod differs from the written one's\nwritten: %+v\nstored:  %+v",
				kind, written.Spec.Volumes[0].VolumeSource, stored.Spec.Volumes[0].VolumeSource)
		}
		if kind == "EmptyDir" {
			if got, want := signing.Digest(stored.Spec.Containers), signing.Digest(written.Spec.Containers); got != want {
				t.Errorf("the container digest of the stored pod differs from the written one's\nwritten: %+v\nstored:  %+v",
					written.Spec.Containers[0], stored.Spec.Containers[0])
			}
		}
	}
	if admitted < len(sources)/2 {
		t.Errorf("the apiserver admitted %d of %d kinds of volume: the cases are wrong", admitted, len(sources))
	}
	t.Logf("%d of %d kinds of volume admitted and checked", admitted, len(sources))
}
