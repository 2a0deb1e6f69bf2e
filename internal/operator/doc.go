// Package operator wires the in-cluster manager: it keeps the injection
// engine in step with the cluster's Sidecars, keeps the signing key the
// webhook signs injection records with, grants RBAC and pull secrets to the
// pods whose records verify, registers the webhook configuration and serves
// the webhook.
package operator
