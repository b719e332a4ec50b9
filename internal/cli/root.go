// Package cli is zeishctl: one cobra command per API call, built only on the
// public Go SDK (sdk/go), so the CLI can do nothing an SDK user cannot.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	zeish "github.com/zeish/zeish/sdk/go"
)

// Version is zeishctl's version; release builds set it with
// -ldflags "-X github.com/zeish/zeish/internal/cli.Version=…".
var Version = "dev"

// streams are the process's standard files, apart so tests can fake a pipe
// on stdin.
type streams struct {
	in            io.Reader
	inIsTerminal  bool // a terminal's stdin is never forwarded to exec
	out, err      io.Writer
	errIsTerminal bool // progress lines are drawn on a terminal's stderr only
}

// app is the state one zeishctl invocation shares between its commands.
type app struct {
	streams
	output string // "text" or "json"
	apiURL string
	apiKey string
	// ran is set once a command's own code starts: an error before that is
	// cobra rejecting the command line, a usage error (exit 2).
	ran    bool
	client *zeish.Client
}

// Run executes zeishctl with args (without the program name) and returns the
// process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s := streams{in: os.Stdin, out: stdout, err: stderr}
	if fi, err := os.Stdin.Stat(); err != nil || fi.Mode()&os.ModeCharDevice != 0 {
		s.inIsTerminal = true
	}
	// A character device is a terminal or /dev/null; drawing progress into
	// the latter costs nothing.
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			s.errIsTerminal = true
		}
	}
	return run(ctx, args, s)
}

func run(ctx context.Context, args []string, s streams) int {
	a := &app{streams: s}
	root := a.newRoot()
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	return a.report(ctx, cmd, err)
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "zeishctl",
		Short:         "Manage zeish sandboxes: isolated VMs you can fork, snapshot and run commands in",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "text" && a.output != "json" {
				return usageErrorf("--output must be text or json, not %q", a.output)
			}
			a.ran = true
			return nil
		},
	}
	apiURL := os.Getenv("ZEISH_API_URL")
	if apiURL == "" {
		apiURL = zeish.DefaultAPIURL
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	pf.StringVar(&a.apiURL, "api-url", apiURL, "zeishd API URL (env ZEISH_API_URL)")
	// No default shown: a key must never end up in help text or shell history.
	pf.StringVar(&a.apiKey, "api-key", "", "API key (env ZEISH_API_KEY, else "+zeish.AdminKeyPath()+")")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(
		a.sandboxesCmd(),
		a.networkCmd(),
		a.portsCmd(),
		a.browserCmd(),
		a.snapshotsCmd(),
		a.templatesCmd(),
		a.secretsCmd(),
		a.execCmd(),
		a.shellCmd(),
		a.filesCmd(),
		a.processesCmd(),
		a.gitCmd(),
		a.desktopCmd(),
		a.adminCmd(),
		a.keysCmd(),
		a.usageCmd(),
		a.costCmd(),
		a.healthCmd(),
		a.mcpCmd(),
		a.versionCmd(),
	)
	return root
}

// sdk returns the client, built on first use from flags and environment. A
// missing key is not an error here: /healthz needs none, and for the rest the
// server's "unauthenticated" comes with a hint on where keys live.
func (a *app) sdk() *zeish.Client {
	if a.client == nil {
		key := a.apiKey
		if key == "" {
			key, _ = zeish.KeyFromEnv()
		}
		a.client = zeish.NewClient(a.apiURL, key, zeish.WithUserAgent("zeishctl/"+Version))
	}
	return a.client
}

// group makes a command that only holds subcommands: with no argument it
// shows its help; with an unknown one it is a usage error (cobra alone would
// print help and exit 0).
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
	return cmd
}

// parseKV parses repeated K=V flags into a map.
func parseKV(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--%s wants KEY=VALUE, got %q", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

func (a *app) printf(format string, args ...any) {
	fmt.Fprintf(a.out, format, termSafeArgs(args)...)
}
