package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sidecar-operator/sidecar-operator/internal/clusterstate"
	"github.com/sidecar-operator/sidecar-operator/internal/fleet"
	"github.com/sidecar-operator/sidecar-operator/internal/restart"
)

type rolloutOptions struct {
	cluster       clusterFlags
	sidecar       string
	namespace     string
	maxConcurrent int
	dryRun        bool
	timeout       time.Duration
	waitFor       string
	// undo sets the Sidecar's spec back to its previous revision, kept in
	// the operator's namespace, instead of restarting anything.
	undo bool
}

func newRolloutCommand() *cobra.Command {
	o := rolloutOptions{}
	cmd := &cobra.Command{
		Use:   "rollout --sidecar <name> [--namespace N] [--max-concurrent K]",
		Short: "Restart the workloads whose pods carry an old revision of a Sidecar, or missed it",
		Long: `Find the Deployments, StatefulSets and DaemonSets with pods that are outdated
or missed for --sidecar, and restart them as 'kubectl rollout restart' does:
by setting the kubectl.kubernetes.io/restartedAt annotation of the pod
template. The workloads' own controllers replace the pods, so their update
strategies and the PodDisruptionBudgets that guard them are respected.

At most --max-concurrent workloads restart at a time. Each is waited for until
its controller has replaced every pod (--wait updated) and those are available
(--wait available, the default), then its pods are judged again: a restart
that leaves pods without the current revision is a failure. The first failure
stops the rollout: nothing more is restarted.

Pods without such a controller (bare pods, Jobs) are listed, not touched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.sidecar == "" {
				return errors.New("--sidecar is required")
			}
			if o.maxConcurrent < 1 {
				return fmt.Errorf("--max-concurrent: want at least 1, got %d", o.maxConcurrent)
			}
			if o.waitFor != "updated" && o.waitFor != "available" {
				return fmt.Errorf("--wait: want updated or available, got %q", o.waitFor)
			}
			c, err := o.cluster.client()
			if err != nil {
				return err
			}
			if o.undo {
				return o.runUndo(cmd.Context(), c, cmd.OutOrStdout())
			}
			// Ctrl-C stops the rollout: nothing more is restarted.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, c, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.cluster.bind(f)
	f.StringVar(&o.sidecar, "sidecar", "", "the Sidecar whose outdated and missed pods to replace (required)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "only workloads of this namespace (default: all)")
	f.IntVar(&o.maxConcurrent, "max-concurrent", 1, "workloads restarting at the same time")
	f.BoolVar(&o.dryRun, "dry-run", false, "list what would be restarted, and change nothing")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long each workload may take")
	f.StringVar(&o.waitFor, "wait", "available", "wait until the new pods are created (updated) or also available (available)")
	f.BoolVar(&o.undo, "undo", false,
		"set the Sidecar's spec back to its previous revision (RollingUpdate then moves pods there, in place when only images differ)")
	return cmd
}

func (o *rolloutOptions) run(ctx context.Context, c client.Client, w io.Writer) error {
	loader := o.cluster.loader(c)
	snap, err := loader.Load(ctx, o.namespace, true)
	if err != nil {
		return err
	}
	if _, ok := snap.Engine.Revision(o.sidecar); !ok {
		return fmt.Errorf("--sidecar: Sidecar %q does not exist or does not compile", o.sidecar)
	}
	var todo []fleet.Workload
	skipped := 0
	for _, wl := range snap.Summary().Workloads {
		ws, ok := sidecarOf(wl, o.sidecar)
		if !ok || !ws.NeedsRestart() {
			continue
		}
		if restart.New(wl.Kind) == nil {
			fmt.Fprintf(w, "skip %s: not restartable by a controller; delete its pods (%s)\n", wl.WorkloadRef, describeSidecars([]fleet.WorkloadSidecar{ws}))
			skipped++
			continue
		}
		todo = append(todo, wl)
	}
	if len(todo) == 0 && skipped == 0 {
		fmt.Fprintf(w, "every workload's pods carry the current revision of %s\n", o.sidecar)
		return nil
	}
	if len(todo) == 0 {
		fmt.Fprintf(w, "no Deployment, StatefulSet or DaemonSet to restart; the %d workloads above need their pods deleted\n", skipped)
		return nil
	}
	if o.dryRun {
		for _, wl := range todo {
			ws, _ := sidecarOf(wl, o.sidecar)
			fmt.Fprintf(w, "would restart %s: %s\n", wl.WorkloadRef, describeSidecars([]fleet.WorkloadSidecar{ws}))
		}
		return nil
	}

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.maxConcurrent)
	var restarted atomic.Int32
	for _, wl := range todo {
		g.Go(func() error {
			// g.Go waits for a free slot: a failure meanwhile stops the rollout.
			if gctx.Err() != nil {
				return nil
			}
			restarted.Add(1)
			if err := o.restart(gctx, c, loader, wl, say); err != nil {
				return fmt.Errorf("%s: %w", wl.WorkloadRef, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("rollout stopped after %d of %d workloads were started: %w", restarted.Load(), len(todo), err)
	}
	say("rolled out %d of %d: every pod carries the current revision of %s", len(todo), len(todo), o.sidecar)
	return nil
}

func sidecarOf(wl fleet.Workload, name string) (fleet.WorkloadSidecar, bool) {
	for _, s := range wl.Sidecars {
		if s.Name == name {
			return s, true
		}
	}
	return fleet.WorkloadSidecar{}, false
}

// restart restarts one workload, waits for its controller, and judges its pods again.
func (o *rolloutOptions) restart(ctx context.Context, c client.Client, loader *clusterstate.Loader, wl fleet.Workload, say func(string, ...any)) error {
	ws, _ := sidecarOf(wl, o.sidecar)
	say("%s: restarting (%s)", wl.WorkloadRef, describeSidecars([]fleet.WorkloadSidecar{ws}))
	obj := restart.New(wl.Kind)
	key := types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	if err := restart.Restart(ctx, c, obj, time.Now()); err != nil {
		return fmt.Errorf("restarting: %w", err)
	}
	generation := obj.GetGeneration()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			return false, err
		}
		done, progress, failure := restart.Progress(obj, generation, o.waitFor == "available")
		if failure != "" {
			return false, errors.New(failure)
		}
		if progress != last {
			say("%s: %s", wl.WorkloadRef, progress)
			last = progress
		}
		return done, nil
	})
	if err != nil {
		if wait.Interrupted(err) {
			return fmt.Errorf("did not finish within %s (last: %s)", o.timeout, last)
		}
		return err
	}
	snap, err := loader.Load(ctx, wl.Namespace, true)
	if err != nil {
		return err
	}
	for _, after := range snap.Summary().Workloads {
		if after.WorkloadRef != wl.WorkloadRef {
			continue
		}
		ws, _ := sidecarOf(after, o.sidecar)
		if ws.NeedsRestart() || ws.Current == 0 {
			return fmt.Errorf("restarted, but its pods still lack the current revision of %s: %s (see: sidecar-operator verify --sidecar %s -n %s)",
				o.sidecar, describeSidecars([]fleet.WorkloadSidecar{ws}), o.sidecar, wl.Namespace)
		}
		say("%s: done, %s", wl.WorkloadRef, describeSidecars([]fleet.WorkloadSidecar{ws}))
		return nil
	}
	return errors.New("restarted, but it has no pods to judge")
}
