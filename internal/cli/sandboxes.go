package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func (a *app) sandboxesCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "sandboxes",
		Aliases: []string{"sbx", "sandbox"},
		Short:   "Create, list, fork, pause, stop, start, wait on and delete sandboxes",
	})
	cmd.AddCommand(a.createCmd(), a.listCmd(), a.getCmd(), a.waitCmd(), a.deleteCmd(),
		a.lifecycleCmd("pause", "Freeze a running sandbox in memory", "paused", (*zeish.Client).PauseSandbox),
		a.lifecycleCmd("resume", "Let a paused sandbox run again", "running again", (*zeish.Client).ResumeSandbox),
		a.lifecycleCmd("stop", "Suspend a sandbox to disk (no compute used); start resumes it", "stopped", (*zeish.Client).StopSandbox),
		a.lifecycleCmd("start", "Start a stopped sandbox where it stopped", "running (or failed)", (*zeish.Client).StartSandbox),
		a.cloneCmd(), a.lineageCmd(), a.eventsCmd())
	return cmd
}

func (a *app) createCmd() *cobra.Command {
	var req api.CreateSandboxRequest
	var env, secrets, metadata []string
	var wait bool
	var nf networkFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox (returns at once unless --wait)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if req.Secrets, err = parseKV("secret", secrets); err != nil {
				return err
			}
			if req.Metadata, err = parseKV("metadata", metadata); err != nil {
				return err
			}
			req.Network = nf.request()
			opts, watch := a.waitMode(wait)
			sb, err := a.sdk().CreateSandbox(cmd.Context(), req, opts...)
			if err != nil {
				return err
			}
			if watch {
				if sb, err = a.settleOne(cmd.Context(), sb); err != nil {
					return err
				}
			}
			return a.printSandbox(sb)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Template, "template", "", "template to boot (default base)")
	f.StringVar(&req.Name, "name", "", "name (default: generated, like brave-otter-42)")
	f.StringVar(&req.Size, "size", "", "size preset: small, medium or large (default small)")
	f.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory in MiB, overrides the preset")
	f.IntVar(&req.VCPUs, "vcpus", 0, "virtual CPUs, overrides the preset")
	f.IntVar(&req.DiskMiB, "disk-mib", 0, "disk in MiB, overrides the preset")
	f.StringVar(&req.Region, "region", "", "region (node label, default local)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "secret KEY=VALUE, write-only (repeatable)")
	f.StringArrayVar(&metadata, "metadata", nil, "metadata KEY=VALUE (repeatable)")
	f.BoolVar(&req.Browser, "browser", false, "start Chromium with the DevTools protocol (a template with the browser feature, e.g. desktop); see zeishctl browser")
	f.BoolVar(&wait, "wait", false, "return once the sandbox is running (or failed)")
	nf.add(f)
	addGitFlags(f, &req)
	return cmd
}

func (a *app) listCmd() *cobra.Command {
	var opts zeish.ListOptions
	var state string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.State = zeish.State(state)
			list, err := a.sdk().ListSandboxes(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if a.json() {
				if list == nil {
					list = []zeish.Sandbox{} // [] rather than null for scripts
				}
				return a.printJSON(api.SandboxList{Sandboxes: list})
			}
			return a.printSandboxes(list)
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only sandboxes in this state (running, stopped, …)")
	cmd.Flags().BoolVar(&opts.IncludeDestroyed, "all", false, "include destroyed sandboxes")
	return cmd
}

func (a *app) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.sdk().GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(sb)
			}
			return a.describe(sb)
		},
	}
}

// describe prints every field people look for, one per line.
func (a *app) describe(sb zeish.Sandbox) error {
	tw := table(a.out, "ID:", sb.ID)
	row(tw, "Name:", sb.Name)
	state := string(sb.State)
	if sb.StateReason != "" {
		state += " (" + sb.StateReason + ")"
	}
	row(tw, "State:", state)
	row(tw, "Template:", sb.Template)
	row(tw, "Size:", fmt.Sprintf("%d vCPU, %d MiB memory, %d MiB disk", sb.VCPUs, sb.MemoryMiB, sb.DiskMiB))
	row(tw, "Region:", sb.Region)
	row(tw, "Host:", sb.Host)
	row(tw, "Hostname:", sb.Hostname)
	row(tw, "Address:", sb.Address)
	if n := sb.Network; n != nil && n.Enabled {
		row(tw, "Egress:", fmt.Sprintf("%s (allow: %s; deny: %s)", n.Egress, strings.Join(n.Allow, ", "), strings.Join(n.Deny, ", ")))
	}
	if sb.ParentID != "" {
		row(tw, "Parent:", sb.ParentID)
	}
	if len(sb.Env) > 0 {
		row(tw, "Env:", joinKV(sb.Env))
	}
	if len(sb.Metadata) > 0 {
		row(tw, "Metadata:", joinKV(sb.Metadata))
	}
	row(tw, "Cost:", fmt.Sprintf("$%.6f", float64(sb.CostMicros)/1e6))
	row(tw, "Created:", sb.CreatedAt.Local().Format(time.RFC3339)+" ("+age(sb.CreatedAt)+")")
	return tw.Flush()
}

func joinKV(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, " ")
}

func (a *app) waitCmd() *cobra.Command {
	var state string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait until a sandbox settles (or reaches --state)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := zeish.WaitRequest{State: zeish.State(state), TimeoutSeconds: int(timeout.Round(time.Second) / time.Second)}
			sb, err := a.sdk().WaitSandbox(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if err := a.printSandbox(sb); err != nil {
				return err
			}
			if sb.State == zeish.StateError && req.State != zeish.StateError {
				return &zeish.SandboxError{Sandbox: sb, Wanted: req.State}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "state to wait for (default: any settled state)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (default 2m, at most 10m)")
	return cmd
}

func (a *app) deleteCmd() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:     "delete ID",
		Aliases: []string{"rm"},
		Short:   "Delete a sandbox and its snapshots",
		Long:    "Delete a sandbox and its snapshots; the record stays, destroyed, for lineage and billing.\n\n" + sandbox.Describe(sandbox.OpDelete),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []zeish.CallOption
			if wait {
				opts = append(opts, zeish.Wait())
			}
			sb, err := a.sdk().DeleteSandbox(cmd.Context(), args[0], opts...)
			if err != nil {
				return err
			}
			return a.printSandbox(sb)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "return once the sandbox is destroyed")
	return cmd
}
