// Command app is the stand-in business container of the local node's pods: it
// appends a numbered line to a log file under /var/log (the emptyDir that a
// log shipper sidecar reads) at a fixed interval until SIGTERM.
//
// "app tail" prints the last lines of that file and exits: the command that
// the xxl-job agent stand-in runs in this container through pods/exec, since
// the image holds no shell.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

const defaultFile = "/var/log/app.log"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "tail" {
		if err := tail(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "app tail:", err)
			os.Exit(1)
		}
		return
	}
	file := flag.String("file", defaultFile, "the log file to append to")
	interval := flag.Duration("interval", time.Second, "time between two lines")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := write(ctx, *file, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
}

func write(ctx context.Context, file string, interval time.Duration) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	host, _ := os.Hostname()
	fmt.Printf("app: writing a line every %s to %s\n", interval, file)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for n := 1; ; n++ {
		line := fmt.Sprintf("%s %s handled request %d\n", time.Now().UTC().Format(time.RFC3339), host, n)
		if _, err := f.WriteString(line); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func tail(args []string) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	file := fs.String("file", defaultFile, "the log file to read")
	n := fs.Int("n", 3, "how many lines to print")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var last []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		last = append(last, scanner.Text())
		if len(last) > *n {
			last = last[1:]
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	for _, line := range last {
		fmt.Println(line)
	}
	return nil
}
