package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) shellCmd() *cobra.Command {
	var user, cwd string
	var env []string
	var attach int
	cmd := &cobra.Command{
		Use:   "shell ID [flags] [-- CMD [ARG...]]",
		Short: "Open an interactive terminal in a sandbox",
		Long: `Open an interactive terminal in a sandbox: the user's login shell, or CMD,
on a pseudo-terminal that follows this window's size. zeishctl's terminal is
in raw mode meanwhile, so Ctrl-C, Ctrl-D and Ctrl-Z go to the sandbox; it
exits with the remote process's exit code. If the connection drops, the
process keeps running for 10 minutes: --attach PID picks it up again.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, ok := a.in.(*os.File)
			if !ok || !a.inIsTerminal {
				return usageErrorf("shell needs a terminal on stdin; use exec for scripts")
			}
			envMap, err := parseKV("env", env)
			if err != nil {
				return err
			}
			rows, cols, err := windowSize(in)
			if err != nil {
				return fmt.Errorf("reading the window size: %w", err)
			}
			ctx := cmd.Context()
			conn, err := a.sdk().Connect(ctx, args[0])
			if err != nil {
				return err
			}
			var term *zeish.Terminal
			if attach > 0 {
				term, err = conn.AttachTerminal(ctx, attach, rows, cols)
			} else {
				term, err = conn.Terminal(ctx, zeish.TerminalRequest{Argv: args[1:], Env: envMap, Cwd: cwd, User: user, Rows: rows, Cols: cols})
			}
			if err != nil {
				return err
			}
			defer term.Close()
			restore, err := makeRaw(in)
			if err != nil {
				return fmt.Errorf("raw mode: %w", err)
			}
			defer restore()
			res, err := relay(ctx, term, in, a.out)
			if err != nil {
				restore()
				return fmt.Errorf("%w (the process may still run: zeishctl shell %s --attach %d)", err, args[0], term.PID())
			}
			if code := execExitCode(res); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&user, "user", "", "user to run as (default root)")
	f.StringVar(&cwd, "cwd", "", "working directory (default the user's home)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.IntVar(&attach, "attach", 0, "re-attach to the terminal with this pid instead of starting one")
	return cmd
}

// relay copies keystrokes in and output out, follows the window size, and
// returns how the process ended.
func relay(ctx context.Context, term *zeish.Terminal, in *os.File, out io.Writer) (zeish.ExecResult, error) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, sigWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if rows, cols, err := windowSize(in); err == nil {
				term.Resize(ctx, rows, cols)
			}
		}
	}()
	// Not waited for: a read of the terminal blocks until the next keystroke.
	go io.Copy(term, in)
	io.Copy(out, term)
	return term.Wait(ctx)
}
