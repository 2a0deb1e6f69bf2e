package pullsecret

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/api/v1alpha1"
)

// copyRecord is what the ledger knows of a copy: the UID the apiserver gave
// it and its source, namespace/name.
type copyRecord struct {
	uid  types.UID
	from string
}

// ledger records the copies that exist, in a ConfigMap: one entry per copy,
// "<namespace>.<name>" (a namespace has no dot) to "<uid> <source>". A
// ConfigMap holds 1 MiB: about ten thousand copies.
type ledger struct {
	key types.NamespacedName
	// resourceVersion is the ConfigMap's as read or written; empty while
	// there is none.
	resourceVersion string
	copies          map[types.NamespacedName]copyRecord
	changed         bool
}

func readLedger(ctx context.Context, r client.Reader, key types.NamespacedName) (*ledger, error) {
	l := &ledger{key: key, copies: map[types.NamespacedName]copyRecord{}}
	var cm corev1.ConfigMap
	err := r.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the pull secret copies' ledger %s: %w", key, err)
	}
	l.merge(&cm)
	return l, nil
}

// merge takes the ConfigMap's resourceVersion, and the entries l lacks.
func (l *ledger) merge(cm *corev1.ConfigMap) {
	l.resourceVersion = cm.ResourceVersion
	for k, v := range cm.Data {
		ns, name, ok := strings.Cut(k, ".")
		uid, from, ok2 := strings.Cut(v, " ")
		key := types.NamespacedName{Namespace: ns, Name: name}
		if _, have := l.copies[key]; ok && ok2 && !have {
			l.copies[key] = copyRecord{uid: types.UID(uid), from: from}
		}
	}
}

// entryName is the ledger's key for the copy at key.
func entryName(key types.NamespacedName) string { return key.Namespace + "." + key.Name }

// recordable tells whether the ledger can hold the copy at key: a
// ConfigMap's keys are at most 253 characters.
func recordable(key types.NamespacedName) error {
	if n := len(entryName(key)); n > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("secret %s is not copied: its namespace and name are %d characters together, the ledger holds at most %d",
			key, n, validation.DNS1123SubdomainMaxLength)
	}
	return nil
}

func (l *ledger) record(key types.NamespacedName, c copyRecord) {
	l.copies[key], l.changed = c, true
}

func (l *ledger) forget(key types.NamespacedName) {
	if _, ok := l.copies[key]; ok {
		delete(l.copies, key)
		l.changed = true
	}
}

// save writes the ledger if it changed. Another writer's version (a former
// leader's) is merged, never overwritten: a copy it recorded is one to
// delete some day. What is not saved is saved by the next pass.
func (l *ledger) save(ctx context.Context, c client.Client, live client.Reader) error {
	if !l.changed {
		return nil
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: l.key.Namespace, Name: l.key.Name, ResourceVersion: l.resourceVersion,
			Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy},
		},
		Data: make(map[string]string, len(l.copies)),
	}
	for k, r := range l.copies {
		cm.Data[entryName(k)] = string(r.uid) + " " + r.from
	}
	var err error
	if l.resourceVersion == "" {
		err = c.Create(ctx, cm)
	} else {
		err = c.Update(ctx, cm)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		var theirs corev1.ConfigMap
		if err := live.Get(ctx, l.key, &theirs); err != nil {
			return fmt.Errorf("reading the pull secret copies' ledger %s: %w", l.key, err)
		}
		l.merge(&theirs)
		return fmt.Errorf("the pull secret copies' ledger %s was written by another: merged, saved on the next pass", l.key)
	}
	if err != nil {
		return fmt.Errorf("saving the pull secret copies' ledger %s: %w", l.key, err)
	}
	l.resourceVersion, l.changed = cm.ResourceVersion, false
	return nil
}
