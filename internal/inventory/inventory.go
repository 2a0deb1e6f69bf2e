// Package inventory serves the operator's read-only admin API and page:
// /admin/v1/inventory (nodes, namespaces with their injection labels, and the
// Deployments and Services of each, with the sidecars each Deployment's pods
// carry), /admin/v1/sidecars (the fleet status) and / (both as tables). It
// serves behind controller-runtime's metrics filter, which authenticates and
// authorizes every request through the apiserver.
package inventory

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
)

// +kubebuilder:rbac:groups="",resources=nodes;services,verbs=list
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=list
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Paths the admin server serves. Not under /api/: Kubernetes' default
// ClusterRole system:discovery grants every authenticated user GET on the
// non-resource URLs /api/*, which would make the authorization check moot.
const (
	PathInventory = "/admin/v1/inventory"
	PathSidecars  = "/admin/v1/sidecars"
	PathPage      = "/"
)

//go:embed index.html
var page []byte

// Inventory is what /admin/v1/inventory returns.
type Inventory struct {
	Nodes      []Node      `json:"nodes"`
	Namespaces []Namespace `json:"namespaces"`
}

// Node is a node and whether it is Ready.
type Node struct {
	Name           string `json:"name"`
	Ready          bool   `json:"ready"`
	KubeletVersion string `json:"kubeletVersion"`
}

// Namespace is a namespace as injection sees it.
type Namespace struct {
	Name string `json:"name"`
	// InjectionLabels are the namespace's labels that decide injection: the
	// sidecar-operator.io/ ones and those a namespace selector reads.
	InjectionLabels map[string]string `json:"injectionLabels"`
	// Webhook is false when the webhook configuration leaves the namespace
	// out, or does not exist.
	Webhook bool `json:"webhook"`
	// Sidecars are those whose namespace selector admits the namespace.
	Sidecars    []string     `json:"sidecars"`
	Deployments []Deployment `json:"deployments"`
	Services    []Service    `json:"services"`
}

// Deployment is a Deployment and what its pods carry.
type Deployment struct {
	Name     string                  `json:"name"`
	Replicas int32                   `json:"replicas"`
	Ready    int32                   `json:"ready"`
	Sidecars []fleet.WorkloadSidecar `json:"sidecars"`
}

// Service is a Service's address and ports.
type Service struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	ClusterIP string   `json:"clusterIP"`
	Ports     []string `json:"ports"`
}

// Handlers serves the admin API and page.
type Handlers struct {
	// Loader reads Sidecars, namespaces and pods, from the manager's cache.
	Loader *clusterstate.Loader
	// Live lists nodes, Deployments and Services, which the operator does
	// not cache: its memory does not grow with them.
	Live client.Reader
}

// Map returns the handlers by path, for metricsserver.Options.ExtraHandlers.
func (h *Handlers) Map() map[string]http.Handler {
	return map[string]http.Handler{
		PathInventory: getOnly(h.serveInventory),
		PathSidecars:  getOnly(h.serveSidecars),
		PathPage:      getOnly(servePage),
	}
}

func getOnly(f func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: GET only", http.StatusMethodNotAllowed)
			return
		}
		f(w, r)
	})
}

func servePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != PathPage {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(page)
}

func (h *Handlers) serveSidecars(w http.ResponseWriter, r *http.Request) {
	snap, err := h.Loader.Load(r.Context(), "", true)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, snap.Status())
}

func (h *Handlers) serveInventory(w http.ResponseWriter, r *http.Request) {
	inv, err := h.Inventory(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, inv)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Inventory reads the cluster's inventory.
func (h *Handlers) Inventory(ctx context.Context) (*Inventory, error) {
	snap, err := h.Loader.Load(ctx, "", true)
	if err != nil {
		return nil, err
	}
	var nodes corev1.NodeList
	if err := h.Live.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var deployments appsv1.DeploymentList
	if err := h.Live.List(ctx, &deployments); err != nil {
		return nil, fmt.Errorf("listing Deployments: %w", err)
	}
	var services corev1.ServiceList
	if err := h.Live.List(ctx, &services); err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}

	inv := &Inventory{Nodes: []Node{}, Namespaces: []Namespace{}}
	for _, n := range nodes.Items {
		node := Node{Name: n.Name, KubeletVersion: n.Status.NodeInfo.KubeletVersion}
		for _, c := range n.Status.Conditions {
			node.Ready = node.Ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		inv.Nodes = append(inv.Nodes, node)
	}

	carried := map[fleet.WorkloadRef][]fleet.WorkloadSidecar{}
	for _, w := range snap.Summary().Workloads {
		carried[w.WorkloadRef] = w.Sidecars
	}
	selectorKeys := map[string]bool{}
	type selected struct {
		name     string
		selector labels.Selector
	}
	var sidecars []selected
	for _, sc := range snap.Sidecars {
		sel := labels.Everything()
		if sc.Spec.NamespaceSelector != nil {
			if sel, err = metav1.LabelSelectorAsSelector(sc.Spec.NamespaceSelector); err != nil {
				continue // left out of the engine too
			}
			for _, req := range mustRequirements(sel) {
				selectorKeys[req.Key()] = true
			}
		}
		sidecars = append(sidecars, selected{sc.Name, sel})
	}

	byName := map[string]*Namespace{}
	for name, nsLabels := range snap.Namespaces {
		ns := &Namespace{Name: name, InjectionLabels: map[string]string{}, Webhook: snap.Webhook != nil && !snap.Excluded(name),
			Sidecars: []string{}, Deployments: []Deployment{}, Services: []Service{}}
		for k, v := range nsLabels {
			if strings.HasPrefix(k, "sidecar-operator.io/") || selectorKeys[k] {
				ns.InjectionLabels[k] = v
			}
		}
		for _, s := range sidecars {
			if s.selector.Matches(labels.Set(nsLabels)) {
				ns.Sidecars = append(ns.Sidecars, s.name)
			}
		}
		slices.Sort(ns.Sidecars)
		byName[name] = ns
	}
	for _, d := range deployments.Items {
		ns := byName[d.Namespace]
		if ns == nil {
			continue
		}
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		list := carried[fleet.WorkloadRef{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name}]
		if list == nil {
			list = []fleet.WorkloadSidecar{}
		}
		ns.Deployments = append(ns.Deployments, Deployment{Name: d.Name, Replicas: replicas, Ready: d.Status.ReadyReplicas, Sidecars: list})
	}
	for _, s := range services.Items {
		ns := byName[s.Namespace]
		if ns == nil {
			continue
		}
		svc := Service{Name: s.Name, Type: string(s.Spec.Type), ClusterIP: s.Spec.ClusterIP, Ports: []string{}}
		for _, p := range s.Spec.Ports {
			svc.Ports = append(svc.Ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
		ns.Services = append(ns.Services, svc)
	}
	for _, ns := range byName {
		inv.Namespaces = append(inv.Namespaces, *ns)
	}
	slices.SortFunc(inv.Namespaces, func(a, b Namespace) int { return strings.Compare(a.Name, b.Name) })
	return inv, nil
}

func mustRequirements(sel labels.Selector) labels.Requirements {
	reqs, _ := sel.Requirements()
	return reqs
}
