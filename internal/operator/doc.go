// Package operator wires the in-cluster manager: it keeps the injection
// engine in step with the cluster's Sidecars, registers the webhook
// configuration and serves the webhook.
package operator
