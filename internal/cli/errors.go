package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/errdefs"
	zeish "github.com/zeish/zeish/sdk/go"
)

// Exit codes beyond a command's own.
const (
	exitError       = 1
	exitUsage       = 2
	exitTimeout     = 124 // as timeout(1)
	exitSignalBase  = 128 // +n for a process ended by signal n, as shells do
	exitInterrupted = 130 // zeishctl itself got SIGINT
)

// exitCode ends zeishctl with a code and no message: exec passing on its
// command's exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// usageError is a command line that makes no sense, reported with exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// report prints err for a human on stderr and returns the exit code.
func (a *app) report(ctx context.Context, cmd *cobra.Command, err error) int {
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var usage usageError
	if errors.As(err, &usage) || !a.ran {
		fmt.Fprintf(a.err, "error: %s\n", termSafeLines(err.Error()))
		path := "zeishctl"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(a.err, "run '%s --help' for usage\n", path)
		return exitUsage
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(a.err, "error: interrupted")
		return exitInterrupted
	}

	var apiErr *zeish.APIError
	var sbErr *zeish.SandboxError
	switch {
	case errors.As(err, &sbErr):
		sb := sbErr.Sandbox
		code := sb.ErrorCode
		if code == "" {
			code = "unknown"
		}
		fmt.Fprintf(a.err, "error: sandbox %s (%s) ended in state error (code %s)\n", termSafe(sb.Name), termSafe(sb.ID), termSafe(code))
		msg := sb.ErrorMessage
		if msg == "" {
			msg = sb.StateReason
		}
		for _, line := range strings.Split(msg, "\n") {
			fmt.Fprintf(a.err, "  %s\n", termSafe(line))
		}
	case errors.As(err, &apiErr):
		fmt.Fprintf(a.err, "error: %s (code %s)\n", termSafeLines(apiErr.Message), termSafe(apiErr.Code))
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Fprintf(a.err, "error: cannot reach zeishd at %s: connection refused\n", a.apiURL)
	default:
		fmt.Fprintf(a.err, "error: %s\n", termSafeLines(err.Error()))
	}
	if hint := hintFor(err); hint != "" {
		fmt.Fprintf(a.err, "hint: %s\n", termSafeLines(hint))
	}
	return exitError
}

// hintFor suggests the next step for the errors people hit first.
func hintFor(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "is zeishd running? start it with `make run`"
	case errors.Is(err, errdefs.ErrTokenExpired):
		return "the data-plane token lapsed; run the command again"
	case errdefs.Is(err, errdefs.ClassUnauthenticated):
		return "set ZEISH_API_KEY or check " + zeish.AdminKeyPath()
	case errors.Is(err, errdefs.ErrNotFound):
		return "`zeishctl sandboxes list` shows your sandboxes"
	case errors.Is(err, errdefs.ErrUnknownTemplate):
		return "the built-in template is `base`"
	case errors.Is(err, errdefs.ErrRunningSlots):
		return "delete or stop a sandbox to free a slot"
	}
	return ""
}
