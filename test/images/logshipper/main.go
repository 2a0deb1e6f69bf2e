// Command logshipper stands in for fluentd in examples/fluentd.yaml: it
// follows every *.log file in the directory the Sidecar mounts (/var/log, the
// emptyDir the app containers write to), from the start, and writes each
// complete line to stdout tagged with its pod: "<namespace>/<pod> <file>: <line>".
//
// It reads what that Sidecar renders: POD_NAMESPACE, and FLUENTD_ARGS, whose
// -q silences its own notices. The pod's name is POD_NAME when set, else
// HOSTNAME, which the container runtime sets to the pod's hostname (its name
// unless spec.hostname says otherwise).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// version is set by the image build for the tags an upgrade test moves
// between (logshipper:v1, :v2); each says its own first.
var version string

func main() {
	dir := flag.String("dir", "/var/log", "the directory whose *.log files to follow")
	poll := flag.Duration("poll", 200*time.Millisecond, "how often to look for new lines")
	flag.Parse()
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		pod = os.Getenv("HOSTNAME")
	}
	s := shipper{
		tag:     os.Getenv("POD_NAMESPACE") + "/" + pod,
		quiet:   slices.Contains(strings.Fields(os.Getenv("FLUENTD_ARGS")), "-q"),
		out:     os.Stdout,
		offsets: map[string]int64{},
		partial: map[string][]byte{},
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if version != "" {
		fmt.Fprintf(os.Stderr, "logshipper %s\n", version)
	}
	s.notice("following %s/*.log every %s", *dir, *poll)
	ticker := time.NewTicker(*poll)
	defer ticker.Stop()
	for {
		s.scan(*dir)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

type shipper struct {
	tag     string
	quiet   bool
	out     io.Writer
	offsets map[string]int64  // bytes of each file already read
	partial map[string][]byte // a line read without its newline yet
}

func (s *shipper) notice(format string, args ...any) {
	if !s.quiet {
		fmt.Fprintf(os.Stderr, "logshipper: "+format+"\n", args...)
	}
}

func (s *shipper) scan(dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		s.notice("%v", err)
		return
	}
	for _, file := range files {
		if err := s.follow(file); err != nil {
			s.notice("%s: %v", file, err)
		}
	}
}

// follow ships the complete lines appended to file since the last call; a
// file that shrank was truncated or replaced and is read again from the start.
func (s *shipper) follow(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	offset, seen := s.offsets[file]
	if !seen {
		s.notice("found %s", file)
	}
	if info.Size() < offset {
		s.notice("%s shrank: reading it again", file)
		offset, s.partial[file] = 0, nil
	}
	if info.Size() == offset {
		s.offsets[file] = offset
		return nil
	}
	data, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil {
		return err
	}
	s.offsets[file] = offset + int64(len(data))
	pending := s.partial[file]
	pending = append(pending, data...)
	name := filepath.Base(file)
	for {
		line, rest, found := bytes.Cut(pending, []byte{'\n'})
		if !found {
			s.partial[file] = pending
			return nil
		}
		if _, err := fmt.Fprintf(s.out, "%s %s: %s\n", s.tag, name, line); err != nil {
			return err
		}
		pending = rest
	}
}
