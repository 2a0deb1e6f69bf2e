// Package webhook owns the admission HTTP endpoints: it decodes
// AdmissionReview v1 and v1beta1, runs the injection engine and writes the
// response. It reads only what it needs from the request and writes the
// response by hand, because it sits on the path of every pod creation.
package webhook
