// Package inject owns the injection engine: deciding which Sidecars a pod gets,
// rendering them from pod annotations, and producing both the JSON Patch the
// webhook returns and the mutated Pod. It is pure: no API client, no I/O.
//
// The hot path (Engine.InjectJSON) reads only the few pod fields the decision
// needs from the raw JSON and writes patch operations directly; Engine.Inject
// does the same planning on a typed Pod and also returns the mutated Pod.
package inject
