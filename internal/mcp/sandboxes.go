package mcp

import (
	"context"
	"fmt"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// settleTimeout bounds how long a tool waits for a sandbox to boot, fork,
// restore or be deleted. TCG guests are slow; past this the agent gets a
// timeout error and can look at the sandbox with list_sandboxes.
const settleTimeout = 10 * time.Minute

// SandboxInfo is what the tools report about a sandbox: the fields an agent
// acts on, not the billing and account details.
type SandboxInfo struct {
	ID          string            `json:"id" jsonschema:"sandbox id (sbx_…); pass it to the other tools"`
	Name        string            `json:"name" jsonschema:"human-readable name, unique among live sandboxes"`
	State       string            `json:"state" jsonschema:"starting, running, paused, stopping, stopped, deleting, destroyed or error"`
	StateReason string            `json:"state_reason,omitempty" jsonschema:"why the sandbox is in its state, when it is error or stopped"`
	Template    string            `json:"template" jsonschema:"template the sandbox was created from"`
	VCPUs       int               `json:"vcpus" jsonschema:"virtual CPUs"`
	MemoryMiB   int               `json:"memory_mib" jsonschema:"memory in MiB"`
	DiskMiB     int               `json:"disk_mib" jsonschema:"disk size in MiB"`
	Hostname    string            `json:"hostname,omitempty" jsonschema:"the guest's hostname"`
	Address     string            `json:"address,omitempty" jsonschema:"the guest's network address"`
	ParentID    string            `json:"parent_id,omitempty" jsonschema:"the sandbox this one was cloned from, if any"`
	Env         map[string]string `json:"env,omitempty" jsonschema:"environment variables every command in the sandbox gets"`
	CreatedAt   time.Time         `json:"created_at" jsonschema:"when the sandbox was created (RFC 3339)"`
}

func sandboxInfo(sb zeish.Sandbox) SandboxInfo {
	return SandboxInfo{
		ID: sb.ID, Name: sb.Name, State: string(sb.State), StateReason: sb.StateReason, Template: sb.Template,
		VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, DiskMiB: sb.DiskMiB, Hostname: sb.Hostname,
		Address: sb.Address, ParentID: sb.ParentID, Env: sb.Env, CreatedAt: sb.CreatedAt,
	}
}

type CreateSandboxInput struct {
	Template    string            `json:"template,omitempty" jsonschema:"template to boot; default base (a small Linux userland with busybox sh)"`
	Name        string            `json:"name,omitempty" jsonschema:"name for the sandbox: lowercase letters, digits and dashes; generated if omitted"`
	Size        string            `json:"size,omitempty" jsonschema:"size preset: small (1 vCPU, 512 MiB, default), medium or large; vcpus and memory_mib override it"`
	MemoryMiB   int               `json:"memory_mib,omitempty" jsonschema:"memory in MiB, for example 256 or 1024"`
	VCPUs       int               `json:"vcpus,omitempty" jsonschema:"number of virtual CPUs"`
	Env         map[string]string `json:"env,omitempty" jsonschema:"environment variables every command in the sandbox gets"`
	Egress      string            `json:"egress,omitempty" jsonschema:"network egress: allow (default, every public destination except deny rules) or deny (only allow rules)"`
	Allow       []string          `json:"allow,omitempty" jsonschema:"destinations the sandbox may reach: IPv4 addresses, CIDRs, domains or *.domains"`
	Deny        []string          `json:"deny,omitempty" jsonschema:"destinations it may not reach (wins over allow)"`
	RateBytes   int64             `json:"rate_bytes_per_second,omitempty" jsonschema:"cap on network traffic in bytes per second, each way; default: the node's (also the most allowed)"`
	RatePackets int64             `json:"rate_packets_per_second,omitempty" jsonschema:"cap in packets per second, each way; default: the node's"`
	GitRepo     string            `json:"git_repo,omitempty" jsonschema:"a git repository (https or git URL, no credentials in it) cloned into /home/user/workspace before the sandbox runs; needs the debian template"`
	GitBranch   string            `json:"git_branch,omitempty" jsonschema:"the branch to check out (default the repository's)"`
	PRNumber    int               `json:"pr_number,omitempty" jsonschema:"a pull request to check out on branch pr-N instead"`
	Browser     bool              `json:"browser,omitempty" jsonschema:"start a headless Chromium with the DevTools protocol (template desktop); browser_url gives its URL"`
}

type ListSandboxesInput struct {
	State            string `json:"state,omitempty" jsonschema:"only sandboxes in this state (running, stopped, …); default any"`
	IncludeDestroyed bool   `json:"include_destroyed,omitempty" jsonschema:"also list deleted sandboxes, kept for history"`
}

type ListSandboxesOutput struct {
	Sandboxes []SandboxInfo `json:"sandboxes" jsonschema:"the account's sandboxes"`
}

type SandboxIDInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox (its id sbx_… or its name)"`
}

type CloneSandboxInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox to fork (its id sbx_… or its name); it may be running or stopped"`
	Count     int    `json:"count,omitempty" jsonschema:"how many copies to make, 1 to 16; default 1"`
	Name      string `json:"name,omitempty" jsonschema:"name of the copy; with count > 1 the copies are <name>-1 … <name>-N; generated if omitted"`
}

type CloneSandboxOutput struct {
	PauseMS   int64         `json:"pause_ms" jsonschema:"how long the parent was paused to capture its state, in milliseconds"`
	Sandboxes []SandboxInfo `json:"sandboxes" jsonschema:"the new sandboxes, running unless their state says otherwise"`
}

type CreateSnapshotInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox to snapshot (its id sbx_… or its name)"`
	Name      string `json:"name,omitempty" jsonschema:"snapshot name, unique within the sandbox; default snapshot-<UTC time>"`
}

type SnapshotInfo struct {
	ID        string    `json:"id" jsonschema:"snapshot id (snp_…); pass it to restore_snapshot"`
	SandboxID string    `json:"sandbox_id" jsonschema:"the sandbox it belongs to"`
	Name      string    `json:"name" jsonschema:"snapshot name"`
	CreatedAt time.Time `json:"created_at" jsonschema:"when it was taken (RFC 3339)"`
	SizeBytes int64     `json:"size_bytes" jsonschema:"space it takes on the host"`
}

func snapshotInfo(s zeish.Snapshot) SnapshotInfo {
	return SnapshotInfo{ID: s.ID, SandboxID: s.SandboxID, Name: s.Name, CreatedAt: s.CreatedAt, SizeBytes: s.SizeBytes}
}

type RestoreSnapshotInput struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"snapshot to roll its sandbox back to (snp_…)"`
}

type RestoreSnapshotOutput struct {
	Snapshot SnapshotInfo `json:"snapshot" jsonschema:"the snapshot restored"`
	Sandbox  SandboxInfo  `json:"sandbox" jsonschema:"the sandbox as it is after the restore"`
}

func (t *tools) addSandboxTools(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "create_sandbox",
		Title: "Create sandbox",
		Description: "Create a new sandbox (an isolated Linux VM) and wait until it is running, which can take a minute. " +
			"Returns its id for exec, read_file, write_file and the other tools. Delete it with delete_sandbox when done.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.createSandbox)
	add(s, &sdkmcp.Tool{
		Name:        "list_sandboxes",
		Title:       "List sandboxes",
		Description: "List the account's sandboxes with their id, name and state.",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.listSandboxes)
	add(s, &sdkmcp.Tool{
		Name:  "delete_sandbox",
		Title: "Delete sandbox",
		Description: "Delete a sandbox and all its snapshots, and wait until it is gone. Its clones are not affected. " +
			"Anything in it that was not copied out is lost.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, t.deleteSandbox)
	add(s, &sdkmcp.Tool{
		Name:  "clone_sandbox",
		Title: "Clone (fork) sandbox",
		Description: "Fork a sandbox into count copies that carry on from the very same point: same files, same running " +
			"processes and memory, copy-on-write. Each copy is a new sandbox with its own id, name, hostname and address. " +
			"The parent is paused only for a moment (pause_ms) and keeps running. Waits until every copy runs. " +
			"Use it to prepare an environment once and try several things in parallel.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.cloneSandbox)
	add(s, &sdkmcp.Tool{
		Name:  "create_snapshot",
		Title: "Snapshot sandbox",
		Description: "Save a sandbox's disk and memory at this instant under a name (at most 20 per sandbox). " +
			"restore_snapshot rolls the same sandbox back to it later. A running sandbox is paused only for a moment.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.createSnapshot)
	add(s, &sdkmcp.Tool{
		Name:  "restore_snapshot",
		Title: "Restore snapshot",
		Description: "Roll a sandbox back to one of its snapshots: files, memory and processes return to that instant and " +
			"all later work in it is lost. Waits until the sandbox runs again. Other snapshots and clones are untouched.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, t.restoreSnapshot)
}

func (t *tools) createSandbox(ctx context.Context, in CreateSandboxInput) (SandboxInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	sb, err := t.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{
		Template: in.Template, Name: in.Name, Size: in.Size, MemoryMiB: in.MemoryMiB, VCPUs: in.VCPUs, Env: in.Env,
		Network: networkRequest(in), GitRepo: in.GitRepo, GitBranch: in.GitBranch, PRNumber: in.PRNumber, Browser: in.Browser,
	}, zeish.Wait())
	if err != nil {
		return SandboxInfo{}, err
	}
	if sb.State != sandbox.StateRunning {
		// The server's wait ended before the boot did (or the boot failed:
		// WaitForState then says why).
		if sb, err = t.client.WaitForState(ctx, sb.ID, sandbox.StateRunning); err != nil {
			return SandboxInfo{}, fmt.Errorf("sandbox %s did not start: %w", sb.ID, err)
		}
	}
	return sandboxInfo(sb), nil
}

func (t *tools) listSandboxes(ctx context.Context, in ListSandboxesInput) (ListSandboxesOutput, error) {
	list, err := t.client.ListSandboxes(ctx, zeish.ListOptions{State: sandbox.State(in.State), IncludeDestroyed: in.IncludeDestroyed})
	if err != nil {
		return ListSandboxesOutput{}, err
	}
	out := ListSandboxesOutput{Sandboxes: make([]SandboxInfo, 0, len(list))}
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, sandboxInfo(sb))
	}
	return out, nil
}

func (t *tools) deleteSandbox(ctx context.Context, in SandboxIDInput) (SandboxInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	sb, err := t.client.DeleteSandbox(ctx, in.SandboxID, zeish.Wait())
	if err != nil {
		return SandboxInfo{}, err
	}
	return sandboxInfo(sb), nil
}

func (t *tools) cloneSandbox(ctx context.Context, in CloneSandboxInput) (CloneSandboxOutput, error) {
	if in.Count < 0 || in.Count > 16 {
		return CloneSandboxOutput{}, invalidArgf("count must be between 1 and 16, not %d", in.Count)
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	resp, err := t.client.CloneSandbox(ctx, in.SandboxID, zeish.CloneRequest{Name: in.Name, Count: in.Count}, zeish.Wait())
	if err != nil {
		return CloneSandboxOutput{}, err
	}
	out := CloneSandboxOutput{PauseMS: resp.PauseMS, Sandboxes: make([]SandboxInfo, 0, len(resp.Sandboxes))}
	for _, sb := range resp.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, sandboxInfo(sb))
	}
	return out, nil
}

func (t *tools) createSnapshot(ctx context.Context, in CreateSnapshotInput) (SnapshotInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	snp, err := t.client.CreateSnapshot(ctx, in.SandboxID, zeish.CreateSnapshotRequest{Name: in.Name})
	if err != nil {
		return SnapshotInfo{}, err
	}
	return snapshotInfo(snp), nil
}

func (t *tools) restoreSnapshot(ctx context.Context, in RestoreSnapshotInput) (RestoreSnapshotOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	resp, err := t.client.RestoreSnapshot(ctx, in.SnapshotID, zeish.Wait())
	if err != nil {
		return RestoreSnapshotOutput{}, err
	}
	return RestoreSnapshotOutput{Snapshot: snapshotInfo(resp.Snapshot), Sandbox: sandboxInfo(resp.Sandbox)}, nil
}
