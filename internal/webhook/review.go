package webhook

import (
	"encoding/base64"
	encjson "encoding/json"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	corev1 "k8s.io/api/core/v1"

	"github.com/sidecar-operator/sidecar-operator/internal/inject"
)

const (
	admissionV1      = "admission.k8s.io/v1"
	admissionV1beta1 = "admission.k8s.io/v1beta1"
)

// podReview is the part of an AdmissionReview for a pod that the mutating
// handler reads; the pod is decoded straight into the engine's view.
type podReview struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID  string `json:"uid"`
		Kind struct {
			Group   string `json:"group"`
			Version string `json:"version"`
			Kind    string `json:"kind"`
		} `json:"kind"`
		SubResource string         `json:"subResource"`
		Namespace   string         `json:"namespace"`
		Operation   string         `json:"operation"`
		DryRun      *bool          `json:"dryRun"`
		Object      inject.PodView `json:"object"`
	} `json:"request"`
}

// badRequest is a request the handler refuses with HTTP 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func decodePodReview(body []byte, r *podReview) error {
	if err := json.Unmarshal(body, r); err != nil {
		var semErr *json.SemanticError
		var synErr *jsontext.SyntacticError
		switch {
		case errors.As(err, &synErr):
			return &badRequest{fmt.Sprintf("request body is not valid JSON: %v", synErr)}
		case errors.As(err, &semErr):
			return &badRequest{fmt.Sprintf("request body is not an AdmissionReview for a pod: %v", semErr)}
		}
		return &badRequest{fmt.Sprintf("decoding AdmissionReview: %v", err)}
	}
	if r.Kind != "AdmissionReview" || (r.APIVersion != admissionV1 && r.APIVersion != admissionV1beta1) {
		return &badRequest{fmt.Sprintf("want an AdmissionReview of %s or %s, got kind %q apiVersion %q", admissionV1, admissionV1beta1, r.Kind, r.APIVersion)}
	}
	if r.Request == nil {
		return &badRequest{"AdmissionReview has no request"}
	}
	if r.Request.UID == "" {
		return &badRequest{"AdmissionReview request has no uid"}
	}
	return nil
}

// podVolumesFrom decodes the pod's volumes from the whole review, on the rare
// path where the engine must compare a pod volume with a Sidecar's.
func podVolumesFrom(body []byte) inject.PodVolumesFunc {
	return func() ([]corev1.Volume, error) {
		var r struct {
			Request struct {
				Object struct {
					Spec struct {
						Volumes []corev1.Volume `json:"volumes"`
					} `json:"spec"`
				} `json:"object"`
			} `json:"request"`
		}
		err := encjson.Unmarshal(body, &r)
		return r.Request.Object.Spec.Volumes, err
	}
}

// response is what the handler answers; it is written without reflection.
type response struct {
	apiVersion string
	uid        string
	patch      []byte
	warnings   []string
	denial     string
}

func (r *response) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"apiVersion":`...)
	dst = appendString(dst, r.apiVersion)
	dst = append(dst, `,"kind":"AdmissionReview","response":{"uid":`...)
	dst = appendString(dst, r.uid)
	if r.denial != "" {
		dst = append(dst, `,"allowed":false,"status":{"status":"Failure","reason":"Forbidden","code":403,"message":`...)
		dst = appendString(dst, r.denial)
		dst = append(dst, '}')
	} else {
		dst = append(dst, `,"allowed":true`...)
	}
	if r.patch != nil {
		dst = append(dst, `,"patchType":"JSONPatch","patch":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, r.patch)
		dst = append(dst, '"')
	}
	if len(r.warnings) > 0 {
		dst = append(dst, `,"warnings":[`...)
		for i, w := range r.warnings {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, w)
		}
		dst = append(dst, ']')
	}
	return append(dst, "}}"...)
}

func appendString(dst []byte, s string) []byte {
	out, err := jsontext.AppendQuote(dst, s)
	if err == nil {
		return out
	}
	raw, _ := encjson.Marshal(s) // replaces invalid UTF-8
	return append(dst, raw...)
}
