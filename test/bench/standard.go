package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"

	"go.uber.org/zap/zapcore"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
	"github.com/sidecar-operator/sidecar-operator/internal/scheme"
	"github.com/sidecar-operator/sidecar-operator/internal/sidecarfile"
	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// serveStandard serves the same injection as `sidecar-operator serve`, but
// the way a kubebuilder webhook would: controller-runtime decodes the review
// and the pod, the engine mutates the typed pod, and PatchResponseFromRaw
// diffs it against the request's object. It is the baseline the hand-written
// JSON path is measured against.
func serveStandard(args []string) error {
	fs := flag.NewFlagSet("standard", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	certFile := fs.String("cert", "", "PEM certificate")
	keyFile := fs.String("key", "", "PEM key")
	sidecars := fs.String("sidecars", "examples", "Sidecar YAML file, or a directory of them")
	_ = fs.Parse(args)
	route, err := newStandardRoute(*sidecars, os.Stderr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(webhook.PathMutatePods, route)
	return serveBenchTLS(*addr, *certFile, *keyFile, mux)
}

// newStandardRoute is the standard handler as controller-runtime's webhook
// server registers it: metrics around the admission.Webhook, and a zap
// logger at error level, as `serve --zap-log-level error` runs, writing to
// logs.
func newStandardRoute(sidecars string, logs io.Writer) (http.Handler, error) {
	scs, err := sidecarfile.Load(sidecars)
	if err != nil {
		return nil, err
	}
	engine, err := inject.New(scs)
	if err != nil {
		return nil, err
	}
	hook := &admission.Webhook{Handler: &standardMutator{engine: engine, decoder: admission.NewDecoder(scheme.New())}}
	log := zap.New(zap.Level(zapcore.ErrorLevel), zap.WriteTo(logs))
	return admission.StandaloneWebhook(hook, admission.StandaloneOptions{Logger: log.WithName("admission"), MetricsPath: webhook.PathMutatePods})
}

// standardMutator injects as `serve` does: no signer, and namespaces known
// only by their name label.
type standardMutator struct {
	engine  *inject.Engine
	decoder admission.Decoder
}

func (m *standardMutator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := m.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	res, err := m.engine.Inject(pod, req.Namespace, inject.DefaultNamespaceLabels, nil)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if res.Denial != "" {
		return admission.Denied(res.Denial).WithWarnings(res.Warnings...)
	}
	if res.Patch == nil {
		return admission.Allowed("").WithWarnings(res.Warnings...)
	}
	mutated, err := json.Marshal(res.Pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated).WithWarnings(res.Warnings...)
}
