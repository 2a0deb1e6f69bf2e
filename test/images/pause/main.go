// Command pause is the sandbox image of the local node (hack/node.sh): PID 1
// of every pod, holding its namespaces. It reaps the orphans the kernel hands
// to it and exits on SIGTERM or SIGINT, as the upstream pause image does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every exited child: SIGCHLD signals coalesce, so one may
// stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
