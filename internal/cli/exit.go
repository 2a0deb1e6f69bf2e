package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// The exit statuses of every command, as kubectl and CI jobs read them.
const (
	// ExitFailed: a pod would be denied or is not injected, a Sidecar is
	// invalid, or the command failed.
	ExitFailed = 1
	// ExitUsage: the command line is wrong (a flag, an argument, a value).
	ExitUsage = 2
)

// usageError is a wrong command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usagef is a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// ExitCode is the exit status for err, which a command returned: 0 for
// nil, ExitUsage for a wrong command line, else ExitFailed.
func ExitCode(err error) int {
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage),
		// cobra finds the command and checks required flags before any
		// hook of ours runs, and says so in these forms (Command.Find,
		// Command.ValidateRequiredFlags).
		strings.HasPrefix(err.Error(), "unknown command "), strings.HasPrefix(err.Error(), "required flag(s) "):
		return ExitUsage
	}
	return ExitFailed
}

// markUsageErrors makes the flag and argument errors of cmd and its
// subcommands usage errors.
func markUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		markUsageErrors(sub)
	}
}
