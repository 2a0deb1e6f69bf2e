package cli

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sidecar-operator/sidecar-operator/internal/certs"
)

func newCertsCommand() *cobra.Command {
	var service, namespace, dir string
	var caValidity, validity time.Duration
	var force bool
	cmd := &cobra.Command{
		Use:   "certs --service NAME --namespace NS --output-dir DIR",
		Short: "Write a CA and a serving certificate for the webhook's Service, for those who manage certificates themselves",
		Long: `Write ca.crt, tls.crt and tls.key into DIR: a new CA and a serving
certificate signed by it for <svc>, <svc>.<ns>, <svc>.<ns>.svc and
<svc>.<ns>.svc.cluster.local, valid from a few minutes ago against clock skew.
Prints the base64 caBundle for the webhook configurations. Existing files are
kept unless --force is given. This replaces hand-made openssl certificates;
run without it, the operator manages and rotates its certificates itself.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files := map[string][]byte{}
			names := []string{"ca.crt", "tls.crt", "tls.key"}
			if !force {
				for _, name := range names {
					if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
						return fmt.Errorf("%s exists; use --force to replace it", filepath.Join(dir, name))
					}
				}
			}
			ca, err := certs.NewCA(service+"."+namespace+" webhook CA", caValidity)
			if err != nil {
				return err
			}
			leaf, err := ca.Issue(certs.ServiceHosts(service, namespace), validity)
			if err != nil {
				return err
			}
			files["ca.crt"], files["tls.crt"], files["tls.key"] = ca.CertPEM, leaf.CertPEM, leaf.KeyPEM
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			for _, name := range names {
				mode := os.FileMode(0o644)
				if name == "tls.key" {
					mode = 0o600
				}
				if err := os.WriteFile(filepath.Join(dir, name), files[name], mode); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(ca.CertPEM))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&service, "service", "", "the webhook's Service (required)")
	f.StringVarP(&namespace, "namespace", "n", "", "the Service's namespace (required)")
	f.StringVar(&dir, "output-dir", "", "directory to write ca.crt, tls.crt and tls.key into (required)")
	f.DurationVar(&caValidity, "ca-validity", 365*24*time.Hour, "lifetime of the CA")
	f.DurationVar(&validity, "validity", 90*24*time.Hour, "lifetime of the serving certificate")
	f.BoolVar(&force, "force", false, "replace existing files")
	for _, name := range []string{"service", "namespace", "output-dir"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
