package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// lifecycleCall is one of the SDK's lifecycle methods, as a method expression.
type lifecycleCall func(c *zeish.Client, ctx context.Context, id string, opts ...zeish.CallOption) (zeish.Sandbox, error)

// lifecycleCmd makes `sandboxes pause|resume|stop|start ID [--wait]`;
// waitsFor ends the --wait help, "return once the sandbox is …".
func (a *app) lifecycleCmd(action, short, waitsFor string, call lifecycleCall) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   action + " ID",
		Short: short + " (returns at once unless --wait)",
		Long:  short + ".\n\n" + sandbox.Describe(sandbox.Op(action)),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, watch := a.waitMode(wait)
			sb, err := call(a.sdk(), cmd.Context(), args[0], opts...)
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
	cmd.Flags().BoolVar(&wait, "wait", false, "return once the sandbox is "+waitsFor)
	return cmd
}

func (a *app) cloneCmd() *cobra.Command {
	var req api.CloneRequest
	var gitBranch string
	var count, prNumber int
	var maxCost int64
	var browser, desktop, wait bool
	cmd := &cobra.Command{
		Use:     "clone ID",
		Aliases: []string{"fork"},
		Short:   "Fork a sandbox, running or stopped, into new sandboxes that carry on from the same point",
		Long: `Fork a sandbox into --count children (default 1) that carry on from the same
point, memory and disk copy-on-write. A running parent is paused only for a
moment (pause_ms). Children keep the parent's size, region, host, git repo
and env; git branch, PR number, cost cap, browser and desktop too, unless a
flag sets them.

` + sandbox.Describe(sandbox.OpClone),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			// Only what the user set is sent: an unset field keeps the
			// parent's value, while a set one may be a deliberate zero.
			if f.Changed("count") {
				if count < 1 || count > api.MaxCloneCount {
					return usageErrorf("--count must be within 1..%d, got %d", api.MaxCloneCount, count)
				}
				req.Count = count
			}
			if f.Changed("git-branch") {
				req.GitBranch = &gitBranch
			}
			if f.Changed("pr-number") {
				req.PRNumber = &prNumber
			}
			if f.Changed("max-cost-micros") {
				req.MaxCostMicros = &maxCost
			}
			if f.Changed("browser") {
				req.Browser = &browser
			}
			if f.Changed("desktop") {
				req.Desktop = &desktop
			}
			if f.Changed("placement") {
				if req.Placement != api.PlacementParent && req.Placement != api.PlacementAny {
					return usageErrorf("--placement must be %s or %s, got %q", api.PlacementParent, api.PlacementAny, req.Placement)
				}
			}
			opts, watch := a.waitMode(wait)
			resp, err := a.sdk().CloneSandbox(cmd.Context(), args[0], req, opts...)
			if err != nil {
				return err
			}
			if watch {
				if resp.Sandboxes, err = a.settle(cmd.Context(), resp.Sandboxes); err != nil {
					return err
				}
			}
			if a.json() {
				if resp.Sandboxes == nil {
					resp.Sandboxes = []zeish.Sandbox{}
				}
				return a.printJSON(resp)
			}
			a.printf("paused %s for %d ms (pause_ms) to fork it\n", args[0], resp.PauseMS)
			return a.printSandboxes(resp.Sandboxes)
		},
	}
	f := cmd.Flags()
	f.IntVar(&count, "count", 0, fmt.Sprintf("how many children, at most %d (default 1)", api.MaxCloneCount))
	f.StringVar(&req.Name, "name", "", "name of the child (with --count N: NAME-1 … NAME-N); default generated")
	f.StringVar(&gitBranch, "git-branch", "", "git branch of the children (default: the parent's)")
	f.IntVar(&prNumber, "pr-number", 0, "pull request number of the children (default: the parent's)")
	f.Int64Var(&maxCost, "max-cost-micros", 0, "cost cap of each child in micro-dollars (default: the parent's)")
	f.BoolVar(&browser, "browser", false, "give the children a browser, --browser=false to drop it (default: as the parent)")
	f.BoolVar(&desktop, "desktop", false, "give the children a desktop, --desktop=false to drop it (default: as the parent)")
	f.StringVar(&req.Placement, "placement", "", "in a cluster: parent (default: all on the parent's node) or any (those that do not fit there on other nodes)")
	f.BoolVar(&wait, "wait", false, "return once every child is running (or failed)")
	return cmd
}

func (a *app) lineageCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lineage ID",
		Short: "Show the tree a sandbox belongs to: its ancestors and every descendant",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := a.sdk().Lineage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json() {
				if l.Ancestors == nil {
					l.Ancestors = []zeish.LineageEntry{}
				}
				if l.Descendants == nil {
					l.Descendants = []zeish.LineageEntry{}
				}
				return a.printJSON(l)
			}
			return a.printLineage(l)
		},
	}
}

// printLineage draws the lineage as an indented tree: the root, down the line
// of ancestors to the sandbox asked about (marked), then its descendants.
func (a *app) printLineage(l zeish.Lineage) error {
	children := map[string][]zeish.LineageEntry{}
	known := map[string]bool{l.Sandbox.ID: true}
	for _, d := range l.Descendants {
		known[d.ID] = true
	}
	for _, d := range l.Descendants {
		parent := d.ParentID
		if !known[parent] || parent == d.ID {
			parent = l.Sandbox.ID // cannot happen with a sane server; show it anyway
		}
		children[parent] = append(children[parent], d)
	}

	tw := table(a.out, "SANDBOX", "NAME", "STATE", "CREATED")
	indent := ""
	// Ancestors come parent first; the tree starts at the root.
	for i := len(l.Ancestors) - 1; i >= 0; i-- {
		e := l.Ancestors[i]
		row(tw, treePrefix(indent, i == len(l.Ancestors)-1, true)+e.ID, e.Name, e.State, age(e.CreatedAt))
		indent = childIndent(indent, i == len(l.Ancestors)-1, true)
	}
	top := len(l.Ancestors) == 0
	row(tw, treePrefix(indent, top, true)+l.Sandbox.ID, l.Sandbox.Name, l.Sandbox.State, age(l.Sandbox.CreatedAt), "<- this")
	seen := map[string]bool{l.Sandbox.ID: true}
	var walk func(id, indent string)
	walk = func(id, indent string) {
		kids := children[id]
		for i, e := range kids {
			if seen[e.ID] {
				continue
			}
			seen[e.ID] = true
			last := i == len(kids)-1
			row(tw, treePrefix(indent, false, last)+e.ID, e.Name, e.State, age(e.CreatedAt))
			walk(e.ID, childIndent(indent, false, last))
		}
	}
	walk(l.Sandbox.ID, childIndent(indent, top, true))
	return tw.Flush()
}

// treePrefix is what goes before an entry: nothing for the root, a branch
// for everything under it.
func treePrefix(indent string, root, last bool) string {
	switch {
	case root:
		return ""
	case last:
		return indent + "└─ "
	}
	return indent + "├─ "
}

// childIndent is the indent of an entry's children.
func childIndent(indent string, root, last bool) string {
	switch {
	case root:
		return ""
	case last:
		return indent + "   "
	}
	return indent + "│  "
}

func (a *app) eventsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "events ID",
		Short: "Follow a sandbox's state changes until Ctrl-C (-o json: one JSON object per line)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			stream, err := a.sdk().Events(ctx, args[0])
			if err != nil {
				return err
			}
			defer stream.Close()
			// Compact, one per line: `| jq -c` or a line reader gets one
			// event at a time.
			enc := json.NewEncoder(a.out)
			for stream.Next() {
				ev := stream.Event()
				if a.json() {
					err = enc.Encode(ev)
				} else {
					err = printEvent(a.out, ev)
				}
				if err != nil {
					return err
				}
			}
			// Ctrl-C is how one stops following, not a failure.
			if err := stream.Err(); err != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
				return err
			}
			return nil
		},
	}
}

// printEvent writes one state change as a line: when, which sandbox, what state.
func printEvent(w io.Writer, ev zeish.Event) error {
	sb := ev.Sandbox
	at := sb.UpdatedAt
	if at.IsZero() {
		at = time.Now()
	}
	state := string(sb.State)
	if sb.StateReason != "" {
		state += " (" + sb.StateReason + ")"
	}
	_, err := fmt.Fprintf(w, "%s  %s  %s  %s\n", at.Local().Format(time.RFC3339), termSafe(sb.ID), termSafe(sb.Name), termSafe(state))
	return err
}
