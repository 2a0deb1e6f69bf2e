package cli

import (
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/sidecar-operator/sidecar-operator/internal/webhook"
)

// addWebhookLimitFlags gives a command that serves the webhook its limits.
func addWebhookLimitFlags(f *pflag.FlagSet, l *webhook.Limits) {
	f.IntVar(&l.MaxInFlight, webhook.FlagMaxInFlight, webhook.DefaultMaxInFlight,
		"reviews handled at once; more are answered 429 at once, and the apiserver retries or applies failurePolicy")
	l.MaxBufferedBytes = webhook.DefaultMaxBufferedBytes
	f.Var((*mebibytes)(&l.MaxBufferedBytes), webhook.FlagMaxBufferedBytes,
		"MiB of request bodies held at once, each counted at its declared length from its headers on; "+
			"a review beyond it is answered 429 at once, and large ones (over 1 MiB) may fill only 3/4 of it")
}

// mebibytes is a byte count given in MiB.
type mebibytes int64

func (m *mebibytes) String() string { return strconv.FormatInt(int64(*m)>>20, 10) }
func (m *mebibytes) Type() string   { return "int" }
func (m *mebibytes) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return err
	}
	*m = mebibytes(n << 20)
	return nil
}

// limitMemory sets GOMEMLIMIT to 90% of the container's memory limit, so
// that the collector works harder before the kernel kills the process.
// GOMEMLIMIT in the environment wins.
func limitMemory(log logr.Logger) {
	limit, err := memlimit.Set()
	if err != nil {
		log.V(1).Info("no container memory limit to follow", "reason", err.Error())
		return
	}
	log.V(1).Info("memory limit", "GOMEMLIMIT", limit)
}
