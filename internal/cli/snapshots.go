package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) snapshotsCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "snapshots",
		Aliases: []string{"snapshot", "snap"},
		Short:   "Save a sandbox's disk and memory, and roll it back later",
	})
	cmd.AddCommand(a.snapshotCreateCmd(), a.snapshotListCmd(), a.snapshotGetCmd(), a.snapshotRestoreCmd(), a.snapshotDeleteCmd())
	return cmd
}

func (a *app) snapshotCreateCmd() *cobra.Command {
	var req api.CreateSnapshotRequest
	cmd := &cobra.Command{
		Use:   "create ID",
		Short: "Snapshot a sandbox (a running one is paused only for a moment)",
		Long:  "Snapshot a sandbox: its disk and memory at one instant (a running one is paused only for a moment).\n\n" + sandbox.Describe(sandbox.OpSnapshot),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			snp, err := a.sdk().CreateSnapshot(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return a.printSnapshot(snp)
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "name, unique within the sandbox (default snapshot-<UTC YYYYMMDD-HHMMSS>)")
	return cmd
}

func (a *app) snapshotListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list ID",
		Aliases: []string{"ls"},
		Short:   "List a sandbox's snapshots",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := a.sdk().ListSnapshots(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				if list == nil {
					list = []zeish.Snapshot{} // [] rather than null for scripts
				}
				return a.printJSON(api.SnapshotList{Snapshots: list})
			}
			return a.printSnapshots(list)
		},
	}
}

// sandboxFlag adds --sandbox, with which a SNAPSHOT argument may be a name
// within that sandbox as well as an id.
func sandboxFlag(cmd *cobra.Command, sandboxRef *string) {
	cmd.Flags().StringVar(sandboxRef, "sandbox", "", "the snapshot's sandbox (id or name); SNAPSHOT may then be the snapshot's name")
}

func (a *app) snapshotGetCmd() *cobra.Command {
	var sandboxRef string
	cmd := &cobra.Command{
		Use:   "get SNAPSHOT",
		Short: "Show one snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var snp zeish.Snapshot
			var err error
			if sandboxRef != "" {
				snp, err = a.sdk().SandboxSnapshot(cmd.Context(), sandboxRef, args[0])
			} else {
				snp, err = a.sdk().GetSnapshot(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return a.printSnapshot(snp)
		},
	}
	sandboxFlag(cmd, &sandboxRef)
	return cmd
}

func (a *app) snapshotRestoreCmd() *cobra.Command {
	var wait bool
	var sandboxRef string
	cmd := &cobra.Command{
		Use:   "restore SNAPSHOT",
		Short: "Roll a sandbox back to a snapshot; work done since is lost",
		Long: `Roll the snapshot's sandbox back to it. A running sandbox restarts from the
snapshot; a stopped one stays stopped and resumes from it on its next start.
Work done since the snapshot is lost; other snapshots and forks are untouched.

` + sandbox.Describe(sandbox.OpRestore),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, watch := a.waitMode(wait)
			var resp zeish.RestoreResponse
			var err error
			if sandboxRef != "" {
				resp, err = a.sdk().RestoreSandboxSnapshot(cmd.Context(), sandboxRef, args[0], opts...)
			} else {
				resp, err = a.sdk().RestoreSnapshot(cmd.Context(), args[0], opts...)
			}
			if err != nil {
				return err
			}
			if watch {
				if resp.Sandbox, err = a.settleOne(cmd.Context(), resp.Sandbox); err != nil {
					return err
				}
			}
			if a.json() {
				return a.printJSON(resp)
			}
			a.printf("restored %s to snapshot %s (%s); it is %s\n", resp.Sandbox.ID, resp.Snapshot.Name, resp.Snapshot.ID, resp.Sandbox.State)
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "return once the sandbox is running again (or stays stopped)")
	sandboxFlag(cmd, &sandboxRef)
	return cmd
}

func (a *app) snapshotDeleteCmd() *cobra.Command {
	var sandboxRef string
	cmd := &cobra.Command{
		Use:     "delete SNAPSHOT",
		Aliases: []string{"rm"},
		Short:   "Delete a snapshot; the sandbox and its other snapshots are untouched",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if sandboxRef != "" {
				err = a.sdk().DeleteSandboxSnapshot(cmd.Context(), sandboxRef, args[0])
			} else {
				err = a.sdk().DeleteSnapshot(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			// The API answers 204, so -o json has no object to print.
			if !a.json() {
				a.printf("deleted snapshot %s\n", args[0])
			}
			return nil
		},
	}
	sandboxFlag(cmd, &sandboxRef)
	return cmd
}

// printSnapshots prints snapshots as the list table.
func (a *app) printSnapshots(list []zeish.Snapshot) error {
	tw := table(a.out, "ID", "NAME", "SANDBOX", "SIZE", "CREATED")
	for _, s := range list {
		row(tw, s.ID, s.Name, s.SandboxID, byteSize(s.SizeBytes), age(s.CreatedAt))
	}
	return tw.Flush()
}

// printSnapshot prints one snapshot: the object with -o json, else a table row.
func (a *app) printSnapshot(snp zeish.Snapshot) error {
	if a.json() {
		return a.printJSON(snp)
	}
	return a.printSnapshots([]zeish.Snapshot{snp})
}

// byteSize is n in binary units, as ls -h prints it: 512B, 1.5MiB, 20GiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	suffix := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[exp]
	if v >= 10 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f%s", v, suffix)
	}
	return fmt.Sprintf("%.1f%s", v, suffix)
}
