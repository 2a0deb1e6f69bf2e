package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestApplyConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	write := func(content string) {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		file    string
		want    string // mode, drain and hosts, as "mode/drain/hosts"
		wantErr string
	}{
		{name: "defaults", want: "self/5s/a"},
		{name: "file", file: "cert-mode: files\nshutdown-drain: 1m\nhosts: [x, y]\n", want: "files/1m0s/x,y"},
		{name: "environment wins over the file", file: "cert-mode: files\n", env: map[string]string{"SIDECAR_OPERATOR_CERT_MODE": "cert-manager"}, want: "cert-manager/5s/a"},
		{name: "a flag wins over both", args: []string{"--cert-mode", "self"}, file: "cert-mode: files\n", env: map[string]string{"SIDECAR_OPERATOR_CERT_MODE": "cert-manager"}, want: "self/5s/a"},
		{name: "bad value in the environment", env: map[string]string{"SIDECAR_OPERATOR_SHUTDOWN_DRAIN": "soon"}, wantErr: "--shutdown-drain (from environment SIDECAR_OPERATOR_SHUTDOWN_DRAIN)"},
		{name: "bad value in the file", file: "shutdown-drain: soon\n", wantErr: "--shutdown-drain (from config file key shutdown-drain)"},
		{name: "unknown key", file: "shutdown-drian: 1s\n", wantErr: "unknown keys shutdown-drian"},
		{name: "a map where a value belongs", file: "cert-mode: {a: b}\n", wantErr: "key cert-mode: want a value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cmd, got := configCommand()
			args := tc.args
			if tc.file != "" {
				write(tc.file)
				args = append(args, "--config", file)
			}
			if err := cmd.ParseFlags(args); err != nil {
				t.Fatal(err)
			}
			err := applyConfig(cmd)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := got(); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// configCommand is a command with a string, a duration and a list flag and
// --config; values reads them as "mode/drain/hosts".
func configCommand() (cmd *cobra.Command, values func() string) {
	var mode string
	var drain time.Duration
	var hosts []string
	cmd = &cobra.Command{Use: "run"}
	cmd.Flags().StringVar(&mode, "cert-mode", "self", "")
	cmd.Flags().DurationVar(&drain, "shutdown-drain", 5*time.Second, "")
	cmd.Flags().StringSliceVar(&hosts, "hosts", []string{"a"}, "")
	addConfigFlag(cmd)
	return cmd, func() string { return mode + "/" + drain.String() + "/" + strings.Join(hosts, ",") }
}
