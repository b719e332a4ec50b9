package zeish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

// PauseSandbox freezes a running sandbox in memory. It returns at once, unless
// Wait() is given: then once the sandbox is paused.
func (c *Client) PauseSandbox(ctx context.Context, id string, opts ...CallOption) (Sandbox, error) {
	return c.lifecycle(ctx, id, "/pause", opts)
}

// ResumeSandbox lets a paused sandbox run again.
func (c *Client) ResumeSandbox(ctx context.Context, id string, opts ...CallOption) (Sandbox, error) {
	return c.lifecycle(ctx, id, "/resume", opts)
}

// StopSandbox suspends a sandbox to disk: memory and disk are kept, no
// compute is used, and StartSandbox resumes it where it was.
func (c *Client) StopSandbox(ctx context.Context, id string, opts ...CallOption) (Sandbox, error) {
	return c.lifecycle(ctx, id, "/stop", opts)
}

// StartSandbox brings a stopped sandbox back. It returns at once with the
// sandbox starting, unless Wait() is given: then once it settled.
func (c *Client) StartSandbox(ctx context.Context, id string, opts ...CallOption) (Sandbox, error) {
	return c.lifecycle(ctx, id, "/start", opts)
}

func (c *Client) lifecycle(ctx context.Context, id, action string, opts []CallOption) (Sandbox, error) {
	var sb Sandbox
	r := c.control(http.MethodPost, sandboxPath(id, action), nil)
	r.query = applyCallOptions(opts)
	err := c.call(ctx, r, &sb)
	return sb, settledErr(sb, err, opts)
}

// CloneSandbox forks a sandbox, running or stopped, into req.Count children
// (default 1) that carry on from the same point, copy-on-write. A running
// parent is paused only for the moment its state is captured; the response
// says for how long. Fields of req left nil keep the parent's values. Without
// Wait() the children come back starting; with it, once every one settled.
func (c *Client) CloneSandbox(ctx context.Context, id string, req CloneRequest, opts ...CallOption) (CloneResponse, error) {
	return c.clone(ctx, sandboxPath(id, "/clone"), req, opts)
}

// CloneSnapshot starts new sandboxes from a snapshot (by id or name within
// sandbox id): fork children of the sandbox as it was when the snapshot
// was taken. The sandbox itself is not touched.
func (c *Client) CloneSnapshot(ctx context.Context, id, snapshot string, req CloneRequest, opts ...CallOption) (CloneResponse, error) {
	return c.clone(ctx, sandboxSnapshotPath(id, snapshot, "/clone"), req, opts)
}

func (c *Client) clone(ctx context.Context, path string, req CloneRequest, opts []CallOption) (CloneResponse, error) {
	var resp CloneResponse
	r := c.control(http.MethodPost, path, req)
	r.query = applyCallOptions(opts)
	err := c.call(ctx, r, &resp)
	for _, child := range resp.Sandboxes {
		if err == nil {
			err = settledErr(child, nil, opts)
		}
	}
	return resp, err
}

// Lineage returns a sandbox's ancestors (parent first, root last) and all its
// descendants, destroyed ones included.
func (c *Client) Lineage(ctx context.Context, id string) (Lineage, error) {
	var l Lineage
	err := c.call(ctx, c.control(http.MethodGet, sandboxPath(id, "/lineage"), nil), &l)
	return l, err
}

// maxWaitSeconds is the longest one POST …/wait may block on the server.
const maxWaitSeconds = 600

// WaitForState blocks until the sandbox is in state, however long that takes:
// it waits again each time the server's wait times out, and only ctx bounds
// it. A sandbox that ends in a state it cannot leave for the wanted one (error,
// destroyed) fails with errdefs.ErrInvalidState, returned with the sandbox as
// it is.
func (c *Client) WaitForState(ctx context.Context, id string, state State) (Sandbox, error) {
	if state == "" {
		return Sandbox{}, fmt.Errorf("zeish: WaitForState needs a state: %w", errdefs.ErrInvalidArgument)
	}
	for {
		sb, err := c.WaitSandbox(ctx, id, WaitRequest{State: state, TimeoutSeconds: maxWaitSeconds})
		switch {
		case errors.Is(err, errdefs.ErrTimeout) && ctx.Err() == nil:
			continue
		case err != nil:
			return sb, err
		case sb.State == state:
			return sb, nil
		case sb.State == sandbox.StateError:
			return sb, &SandboxError{Sandbox: sb, Wanted: state}
		case sb.State == sandbox.StateDestroyed:
			return sb, fmt.Errorf("zeish: sandbox %s is destroyed and will not become %s: %w", id, state, errdefs.ErrInvalidState)
		}
		// Any other answer is a server that returned early; ask again.
		if err := ctx.Err(); err != nil {
			return sb, err
		}
	}
}

// snapshotPath is the route of one snapshot; sub ("/restore") is appended as is.
func snapshotPath(id, sub string) string {
	return "/public/snapshots/" + url.PathEscape(id) + sub
}

// CreateSnapshot saves a sandbox's disk and memory at one instant. A running
// sandbox is paused only for a moment. An empty req.Name gets a generated
// snapshot-<UTC time> name.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID string, req CreateSnapshotRequest) (Snapshot, error) {
	var snp Snapshot
	err := c.call(ctx, c.control(http.MethodPost, sandboxPath(sandboxID, "/snapshots"), req), &snp)
	return snp, err
}

// ListSnapshots lists one sandbox's snapshots.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]Snapshot, error) {
	var list api.SnapshotList
	if err := c.call(ctx, c.control(http.MethodGet, sandboxPath(sandboxID, "/snapshots"), nil), &list); err != nil {
		return nil, err
	}
	return list.Snapshots, nil
}

// GetSnapshot returns one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	return c.getSnapshot(ctx, snapshotPath(id, ""))
}

// SandboxSnapshot returns one of a sandbox's snapshots by its id or name.
func (c *Client) SandboxSnapshot(ctx context.Context, sandboxID, snapshot string) (Snapshot, error) {
	return c.getSnapshot(ctx, sandboxSnapshotPath(sandboxID, snapshot, ""))
}

func (c *Client) getSnapshot(ctx context.Context, path string) (Snapshot, error) {
	var snp Snapshot
	err := c.call(ctx, c.control(http.MethodGet, path, nil), &snp)
	return snp, err
}

// DeleteSnapshot deletes one snapshot; the sandbox and its other snapshots
// are untouched.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, c.control(http.MethodDelete, snapshotPath(id, ""), nil), nil)
}

// DeleteSandboxSnapshot deletes one of a sandbox's snapshots by its id or name.
func (c *Client) DeleteSandboxSnapshot(ctx context.Context, sandboxID, snapshot string) error {
	return c.call(ctx, c.control(http.MethodDelete, sandboxSnapshotPath(sandboxID, snapshot, ""), nil), nil)
}

// RestoreSnapshot rolls the snapshot's sandbox back to it; work done since is
// lost. A running sandbox restarts from the snapshot (with Wait(), the call
// returns once it is running again); a stopped one stays stopped and resumes
// from the snapshot on its next start.
func (c *Client) RestoreSnapshot(ctx context.Context, id string, opts ...CallOption) (RestoreResponse, error) {
	return c.restore(ctx, snapshotPath(id, "/restore"), opts)
}

// RestoreSandboxSnapshot is RestoreSnapshot with the snapshot named by its
// id or name within its sandbox.
func (c *Client) RestoreSandboxSnapshot(ctx context.Context, sandboxID, snapshot string, opts ...CallOption) (RestoreResponse, error) {
	return c.restore(ctx, sandboxSnapshotPath(sandboxID, snapshot, "/restore"), opts)
}

func (c *Client) restore(ctx context.Context, path string, opts []CallOption) (RestoreResponse, error) {
	var resp RestoreResponse
	r := c.control(http.MethodPost, path, nil)
	r.query = applyCallOptions(opts)
	err := c.call(ctx, r, &resp)
	return resp, settledErr(resp.Sandbox, err, opts)
}

// sandboxSnapshotPath is the route of a sandbox's snapshot by id or name.
func sandboxSnapshotPath(sandboxID, snapshot, sub string) string {
	return sandboxPath(sandboxID, "/snapshots/"+url.PathEscape(snapshot)+sub)
}
