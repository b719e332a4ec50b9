package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	zeish "github.com/zeish/zeish/sdk/go"
)

// maxStdin bounds forwarded stdin: the API carries it inside the exec request,
// so it is held in memory. Larger inputs belong in `files put`.
const maxStdin = 64 << 20

func (a *app) execCmd() *cobra.Command {
	var env []string
	var cwd, user string
	var timeout time.Duration
	var noStdin bool
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox and exit with its exit code",
		Long: `Run a command in a sandbox. Its stdout and stderr are streamed to zeishctl's
as they are produced, and zeishctl exits with the command's exit code
(128+n if a signal n ended it, 124 if --timeout did). zeishctl's stdin is
sent to the command when it is not a terminal.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			envMap, err := parseKV("env", env)
			if err != nil {
				return err
			}
			req := zeish.ExecRequest{Argv: args[1:], Env: envMap, Cwd: cwd, User: user, TimeoutSeconds: timeout.Seconds()}
			if !noStdin && !a.inIsTerminal && a.in != nil {
				if req.Stdin, err = readStdin(a.in); err != nil {
					return err
				}
			}
			conn, err := a.sdk().Connect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			res, err := conn.Exec(cmd.Context(), req, a.out, a.err)
			if err != nil {
				return err
			}
			if code := execExitCode(res); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVar(&cwd, "cwd", "", "working directory in the sandbox (default the template's)")
	f.StringVar(&user, "user", "", "run as this guest user, a name or uid (default the template's, else root)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (exit 124); 0: no limit")
	f.BoolVar(&noStdin, "no-stdin", false, "do not forward stdin even when it is a pipe")
	return cmd
}

func readStdin(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	if len(b) > maxStdin {
		return nil, fmt.Errorf("stdin is larger than %d MiB; copy it in with `zeishctl files put` instead", maxStdin>>20)
	}
	return b, nil
}

// execExitCode is the exit status a shell would report for res.
func execExitCode(res zeish.ExecResult) int {
	switch {
	case res.TimedOut:
		return exitTimeout
	case res.Signal != "":
		return exitSignalBase + signalNumber(res.Signal)
	case res.ExitCode < 0:
		return exitSignalBase // killed, signal unknown
	}
	return res.ExitCode
}

// linuxSignals are the numbers of the guest's (always Linux) signals; the
// client's own OS may number them differently, so syscall is no help.
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
	"STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
	"URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
	"PWR": 30, "SYS": 31,
}

// signalNumber accepts "KILL", "SIGKILL", "killed"-style names and "9".
func signalNumber(name string) int {
	if n, err := strconv.Atoi(name); err == nil {
		return n
	}
	name = strings.TrimPrefix(strings.ToUpper(name), "SIG")
	if n, ok := linuxSignals[name]; ok {
		return n
	}
	if strings.HasPrefix(name, "KILLED") {
		return 9
	}
	return 0
}
