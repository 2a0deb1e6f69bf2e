// Package config holds the kustomize tree that installs the operator, and
// embeds it so that `sidecar-operator manifests` renders the very same files.
package config

import "embed"

// Tree is the kustomize tree: default/ is the install, components/ its options.
//
//go:embed crd rbac manager webhook default components
var Tree embed.FS
