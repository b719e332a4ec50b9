package cli

import (
	"context"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) healthCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Check that zeishd is up, and which VMM and acceleration it uses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := a.sdk().Health(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(h)
			}
			a.printf("%s: zeishd %s, vmm %s, accel %s\n", h.Status, h.Version, h.VMM, h.Accel)
			return nil
		},
	}
}

// versionInfo is `zeishctl version -o json`.
type versionInfo struct {
	Client string      `json:"client"`
	SDK    string      `json:"sdk"`
	Server *api.Health `json:"server"` // null when zeishd cannot be reached
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print zeishctl's version and, if reachable, zeishd's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := versionInfo{Client: Version, SDK: zeish.Version}
			// The server's version is a bonus: a short wait, and no error when
			// zeishd is down, since `version` is what one runs when unsure.
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			defer cancel()
			h, err := a.sdk().Health(ctx)
			if err == nil {
				info.Server = &h
			}
			if a.json() {
				return a.printJSON(info)
			}
			a.printf("zeishctl %s (sdk %s)\n", info.Client, info.SDK)
			if info.Server != nil {
				a.printf("zeishd   %s (vmm %s, accel %s)\n", h.Version, h.VMM, h.Accel)
			} else {
				a.printf("zeishd   unreachable at %s\n", a.apiURL)
			}
			return nil
		},
	}
}

func (a *app) processesCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "processes",
		Aliases: []string{"ps"},
		Short:   "List and signal processes inside a sandbox",
	})
	list := &cobra.Command{
		Use:     "list ID",
		Aliases: []string{"ls"},
		Short:   "List the processes in a sandbox",
		Args:    cobra.ExactArgs(1),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, _ []string) error {
			procs, err := conn.Processes(cmd.Context())
			if err != nil {
				return err
			}
			if a.json() {
				if procs == nil {
					procs = []zeish.Process{}
				}
				return a.printJSON(api.ProcessList{Processes: procs})
			}
			tw := table(a.out, "PID", "PPID", "COMMAND")
			for _, p := range procs {
				row(tw, p.PID, p.PPID, p.Command)
			}
			return tw.Flush()
		}),
	}
	var signal string
	kill := &cobra.Command{
		Use:   "kill ID PID",
		Short: "Send a signal to a process in a sandbox (default KILL)",
		Args:  cobra.ExactArgs(2),
		RunE: a.connected(func(cmd *cobra.Command, conn *zeish.SandboxConn, args []string) error {
			pid, err := strconv.Atoi(args[0])
			if err != nil || pid <= 0 {
				return usageErrorf("PID must be a positive number, got %q", args[0])
			}
			return conn.Kill(cmd.Context(), pid, signal)
		}),
	}
	kill.Flags().StringVarP(&signal, "signal", "s", "", "signal name, like TERM (default KILL)")
	cmd.AddCommand(list, kill)
	return cmd
}
