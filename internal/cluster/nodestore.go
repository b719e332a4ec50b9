package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The Control service's store calls (protocol 2.3): a node agent of 2.3
// opens no database; it reads and writes the shared tables through these,
// and the control plane, their only writer, executes each against its
// store, scoped to the calling node (docs/cluster.md, "Who writes what"):
//
//   - sandboxes: the rows placed on it (host = its id) and the rows a
//     live grant names (GrantFor: sent with the operation that needs them);
//     a new row only for an id a grant names, placed on the caller; an
//     update only if the row still is what the node read (aborted
//     otherwise), never moving a row to another node nor to another
//     account;
//   - snapshots: those of the sandboxes it may read;
//   - templates: every one for reading; writes only of the ones it holds
//     (host = its id) and of the built-ins (no account, no host).
//
// A refusal is permission_denied or not_found with the reason, logged.

// GrantTTL bounds how long a grant sent with an operation lets its node at
// a row: the operation's own reads and writes, and its children's boots
// in the background.
const GrantTTL = 30 * time.Minute

// refuse logs and returns a refusal of a node's store call.
func (g *Registry) refuse(ctx context.Context, call string, err error) error {
	g.log().Warn("node store call refused", "node", caller(ctx), "call", call, "err", err)
	return nodeapi.ToWire(err)
}

// storeErr is a store failure as the node sees it.
func storeErr(err error) error {
	if errdefs.Of(err) == errdefs.ErrInternal {
		err = fmt.Errorf("store: %w: %w", errdefs.ErrUnavailable, err)
	}
	return nodeapi.ToWire(err)
}

// mayReach says whether the calling node may read and write row r: its
// own, or one a live grant names.
func (g *Registry) mayReach(ctx context.Context, r *store.SandboxRecord, grant *nodev2.Grant) bool {
	return r.Host == caller(ctx) || granted(g.Key, caller(ctx), r.ID, grant, time.Now())
}

// sandbox reads id for the caller: not_found when it may not reach it
// (it learns nothing of other nodes' sandboxes).
func (g *Registry) sandbox(ctx context.Context, id string, grant *nodev2.Grant) (*store.SandboxRecord, error) {
	r, err := g.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if !g.mayReach(ctx, r, grant) {
		return nil, fmt.Errorf("sandbox %s is not on node %s and no grant names it: %w", id, caller(ctx), errdefs.ErrNotFound)
	}
	return r, nil
}

func (g *Registry) GetSandbox(ctx context.Context, req *connect.Request[nodev2.StoreSandboxRef]) (*connect.Response[nodev2.StoredSandbox], error) {
	r, err := g.sandbox(ctx, req.Msg.SandboxId, req.Msg.Grant)
	if errdefs.Is(err, errdefs.ClassNotFound) {
		return nil, g.refuse(ctx, "GetSandbox", err)
	}
	if err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(stored(r)), nil
}

// stored is what a node reads of r: never its secrets, sealed or not.
func stored(r *store.SandboxRecord) *nodev2.StoredSandbox {
	m := nodeapi.StoredToWire(r)
	m.SealedSecrets = ""
	return m
}

func (g *Registry) ListSandboxes(ctx context.Context, req *connect.Request[nodev2.StoreListSandboxesRequest]) (*connect.Response[nodev2.StoreListSandboxesReply], error) {
	states, err := nodeapi.StatesFromWire(req.Msg.States)
	if err != nil {
		return nil, nodeapi.ToWire(err)
	}
	rows, err := g.Store.ListSandboxes(ctx, store.SandboxFilter{AccountID: req.Msg.AccountId, States: states, IncludeDestroyed: req.Msg.IncludeDestroyed})
	if err != nil {
		return nil, storeErr(err)
	}
	rep := &nodev2.StoreListSandboxesReply{}
	for _, r := range rows {
		if r.Host == caller(ctx) {
			rep.Sandboxes = append(rep.Sandboxes, stored(r))
		}
	}
	return connect.NewResponse(rep), nil
}

func (g *Registry) CreateSandboxes(ctx context.Context, req *connect.Request[nodev2.StoreCreateSandboxesRequest]) (*connect.Response[nodev2.StoreCreateSandboxesReply], error) {
	grants := map[string]*nodev2.Grant{}
	for _, gr := range req.Msg.Grants {
		grants[gr.GetSandboxId()] = gr
	}
	now := time.Now()
	rs := make([]*store.SandboxRecord, 0, len(req.Msg.Sandboxes))
	for _, m := range req.Msg.Sandboxes {
		r, err := nodeapi.StoredFromWire(m)
		if err != nil {
			return nil, nodeapi.ToWire(err)
		}
		if !granted(g.Key, caller(ctx), r.ID, grants[r.ID], now) {
			return nil, g.refuse(ctx, "CreateSandboxes", fmt.Errorf("sandbox %s: the control plane admitted no such sandbox for node %s: %w", r.ID, caller(ctx), errdefs.ErrForbidden))
		}
		if r.Host != caller(ctx) {
			return nil, g.refuse(ctx, "CreateSandboxes", fmt.Errorf("sandbox %s: node %s records sandboxes on itself only, not on %q: %w", r.ID, caller(ctx), r.Host, errdefs.ErrForbidden))
		}
		if sealed := r.SealedSecrets(); sealed != "" {
			// Sealed by the control plane for this id; it opens here only.
			if r.SecretEnv, err = g.Secrets.Open(r.ID, sealed); err != nil {
				return nil, g.refuse(ctx, "CreateSandboxes", fmt.Errorf("sandbox %s: its sealed secrets are not the control plane's for this id: %w", r.ID, errdefs.ErrForbidden))
			}
			r.SetSealedSecrets("")
		}
		rs = append(rs, r)
	}
	if err := g.Store.CreateSandboxes(ctx, rs...); err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&nodev2.StoreCreateSandboxesReply{}), nil
}

// errConflict is UpdateSandbox's answer when the row moved on since the
// node read it.
var errConflict = fmt.Errorf("the sandbox changed since the node read it: read it again: %w", errdefs.ErrInvalidState)

func (g *Registry) UpdateSandbox(ctx context.Context, req *connect.Request[nodev2.StoreUpdateSandboxRequest]) (*connect.Response[nodev2.StoredSandbox], error) {
	read, write := req.Msg.Read, req.Msg.Write
	next, err := nodeapi.StoredFromWire(write)
	if err != nil {
		return nil, nodeapi.ToWire(err)
	}
	if read.GetSandbox().GetId() != next.ID {
		return nil, nodeapi.ToWire(fmt.Errorf("an update reads sandbox %q and writes %q: %w", read.GetSandbox().GetId(), next.ID, errdefs.ErrInvalidArgument))
	}
	var refused error
	r, err := g.Store.UpdateSandbox(ctx, next.ID, func(cur *store.SandboxRecord) error {
		switch {
		case !g.mayReach(ctx, cur, req.Msg.Grant):
			refused = fmt.Errorf("sandbox %s is not on node %s and no grant names it: %w", cur.ID, caller(ctx), errdefs.ErrNotFound)
		case next.Host != cur.Host && next.Host != caller(ctx):
			refused = fmt.Errorf("sandbox %s: node %s may move it onto itself only, not onto %q: %w", cur.ID, caller(ctx), next.Host, errdefs.ErrForbidden)
		case next.AccountID != cur.AccountID:
			refused = fmt.Errorf("sandbox %s: a node does not change a sandbox's account: %w", cur.ID, errdefs.ErrForbidden)
		case policyOf(next) != policyOf(cur):
			refused = fmt.Errorf("sandbox %s: its name, size, template, parent, budget and timeout are the control plane's to change, not a node's: %w", cur.ID, errdefs.ErrForbidden)
		case !proto.Equal(stored(cur), read):
			return errConflict
		}
		if refused != nil {
			return refused
		}
		keep(next, cur)
		*cur = *next
		return nil
	})
	if refused != nil {
		return nil, g.refuse(ctx, "UpdateSandbox", refused)
	}
	if errors.Is(err, errConflict) || errdefs.Is(err, errdefs.ClassNotFound) {
		return nil, nodeapi.ToWire(err)
	}
	if err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(stored(r)), nil
}

// policy is what of a sandbox the control plane decides and a node only
// reads: what it is called, how big, what it costs and when it ends.
type policy struct {
	name, template, parent, onTimeout string
	vcpus, memoryMiB, diskMiB         int
	maxCost, cost                     int64
	timeoutAt                         int64 // unix nanoseconds, 0: none
}

func policyOf(r *store.SandboxRecord) policy {
	p := policy{name: r.Name, template: r.Template, parent: r.ParentID, onTimeout: r.OnTimeout, vcpus: r.VCPUs,
		memoryMiB: r.MemoryMiB, diskMiB: r.DiskMiB, maxCost: r.MaxCostMicros, cost: r.CostMicros}
	if r.TimeoutAt != nil {
		p.timeoutAt = r.TimeoutAt.UnixNano()
	}
	return p
}

// keep carries into next, a node's write, what of cur it does not write:
// the secrets and whatever private state an older node left in the row.
func keep(next, cur *store.SandboxRecord) {
	next.SecretEnv = cur.SecretEnv
	next.SetSealedSecrets(cur.SealedSecrets())
	next.Handle, next.Disk, next.DiskBase = cur.Handle, cur.Disk, cur.DiskBase
	next.Kernel, next.Initrd, next.KernelArgs = cur.Kernel, cur.Initrd, cur.KernelArgs
	next.Pristine, next.Gen, next.NetKept = cur.Pristine, cur.Gen, cur.NetKept
}

// snapshotOf reads snapshot id and checks the caller may reach its
// sandbox: its own, or one of grants names it.
func (g *Registry) snapshotOf(ctx context.Context, id string, grants []*nodev2.Grant) (*store.SnapshotRecord, error) {
	s, err := g.Store.GetSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	var grant *nodev2.Grant
	for _, gr := range grants {
		if gr.GetSandboxId() == s.SandboxID {
			grant = gr
		}
	}
	if _, err := g.sandbox(ctx, s.SandboxID, grant); err != nil {
		return nil, err
	}
	return s, nil
}

func (g *Registry) GetSnapshot(ctx context.Context, req *connect.Request[nodev2.StoreSnapshotRef]) (*connect.Response[nodev2.StoredSnapshot], error) {
	s, err := g.snapshotOf(ctx, req.Msg.SnapshotId, req.Msg.Grants)
	if err != nil {
		return nil, g.refuseOr(ctx, "GetSnapshot", err)
	}
	return connect.NewResponse(nodeapi.StoredSnapshotToWire(s)), nil
}

// refuseOr logs a not_found (a scope refusal looks like one) and passes
// store failures on.
func (g *Registry) refuseOr(ctx context.Context, call string, err error) error {
	if errdefs.Is(err, errdefs.ClassNotFound) || errdefs.Of(err) == errdefs.ErrForbidden {
		return g.refuse(ctx, call, err)
	}
	return storeErr(err)
}

func (g *Registry) ListSnapshots(ctx context.Context, req *connect.Request[nodev2.StoreSandboxRef]) (*connect.Response[nodev2.StoreListSnapshotsReply], error) {
	id := req.Msg.SandboxId
	if id != "" {
		if _, err := g.sandbox(ctx, id, req.Msg.Grant); err != nil {
			return nil, g.refuseOr(ctx, "ListSnapshots", err)
		}
	}
	snaps, err := g.Store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, storeErr(err)
	}
	rep := &nodev2.StoreListSnapshotsReply{}
	own := map[string]bool{}
	if id == "" { // every snapshot of the caller's sandboxes
		rows, err := g.Store.ListSandboxes(ctx, store.SandboxFilter{IncludeDestroyed: true})
		if err != nil {
			return nil, storeErr(err)
		}
		for _, r := range rows {
			own[r.ID] = r.Host == caller(ctx)
		}
	}
	for _, s := range snaps {
		if id != "" || own[s.SandboxID] {
			rep.Snapshots = append(rep.Snapshots, nodeapi.StoredSnapshotToWire(s))
		}
	}
	return connect.NewResponse(rep), nil
}

func (g *Registry) CreateSnapshotRecord(ctx context.Context, req *connect.Request[nodev2.StoreCreateSnapshotRequest]) (*connect.Response[nodev2.StoredSnapshot], error) {
	s, err := nodeapi.StoredSnapshotFromWire(req.Msg.Snapshot)
	if err != nil {
		return nil, nodeapi.ToWire(err)
	}
	if _, err := g.sandbox(ctx, s.SandboxID, req.Msg.Grant); err != nil {
		return nil, g.refuseOr(ctx, "CreateSnapshotRecord", err)
	}
	if err := g.Store.CreateSnapshot(ctx, s, int(req.Msg.Limit)); err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(nodeapi.StoredSnapshotToWire(s)), nil
}

func (g *Registry) DeleteSnapshotRecord(ctx context.Context, req *connect.Request[nodev2.StoreSnapshotRef]) (*connect.Response[nodev2.StoreDeleteReply], error) {
	if _, err := g.snapshotOf(ctx, req.Msg.SnapshotId, req.Msg.Grants); err != nil {
		return nil, g.refuseOr(ctx, "DeleteSnapshotRecord", err)
	}
	if err := g.Store.DeleteSnapshot(ctx, req.Msg.SnapshotId); err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&nodev2.StoreDeleteReply{}), nil
}

func (g *Registry) GetTemplate(ctx context.Context, req *connect.Request[nodev2.StoreTemplateRef]) (*connect.Response[nodev2.TemplateReply], error) {
	t, err := g.Store.GetTemplate(ctx, req.Msg.Key)
	if err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&nodev2.TemplateReply{Template: nodeapi.TemplateToWire(t)}), nil
}

func (g *Registry) ListTemplates(ctx context.Context, _ *connect.Request[nodev2.StoreListTemplatesRequest]) (*connect.Response[nodev2.StoreListTemplatesReply], error) {
	all, err := g.Store.ListTemplates(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	rep := &nodev2.StoreListTemplatesReply{}
	for _, t := range all {
		rep.Templates = append(rep.Templates, nodeapi.TemplateToWire(t))
	}
	return connect.NewResponse(rep), nil
}

// writesTemplate says whether the caller may write template t: one it
// holds, or a built-in (every node builds those).
func writesTemplate(ctx context.Context, t sandbox.Template) bool {
	return t.Host == caller(ctx) || (t.Host == "" && t.AccountID == "")
}

func (g *Registry) PutTemplate(ctx context.Context, req *connect.Request[nodev2.TemplateReply]) (*connect.Response[nodev2.StoreDeleteReply], error) {
	t := nodeapi.TemplateFromWire(req.Msg.Template)
	if !writesTemplate(ctx, t) {
		return nil, g.refuse(ctx, "PutTemplate", fmt.Errorf("template %s: node %s writes only the templates it holds and the built-ins: %w", t.Key(), caller(ctx), errdefs.ErrForbidden))
	}
	if cur, err := g.Store.GetTemplate(ctx, t.Key()); err == nil && !writesTemplate(ctx, cur) {
		return nil, g.refuse(ctx, "PutTemplate", fmt.Errorf("template %s is held by node %q: %w", t.Key(), cur.Host, errdefs.ErrForbidden))
	}
	if err := g.Store.PutTemplate(ctx, t); err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&nodev2.StoreDeleteReply{}), nil
}

func (g *Registry) DeleteTemplateRecord(ctx context.Context, req *connect.Request[nodev2.StoreTemplateRef]) (*connect.Response[nodev2.StoreDeleteReply], error) {
	cur, err := g.Store.GetTemplate(ctx, req.Msg.Key)
	if errdefs.Is(err, errdefs.ClassNotFound) {
		return connect.NewResponse(&nodev2.StoreDeleteReply{}), nil
	}
	if err != nil {
		return nil, storeErr(err)
	}
	if !writesTemplate(ctx, cur) {
		return nil, g.refuse(ctx, "DeleteTemplateRecord", fmt.Errorf("template %s is held by node %q: %w", req.Msg.Key, cur.Host, errdefs.ErrForbidden))
	}
	if err := g.Store.DeleteTemplate(ctx, req.Msg.Key); err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&nodev2.StoreDeleteReply{}), nil
}

func (g *Registry) ListAPIKeys(ctx context.Context, req *connect.Request[nodev2.StoreAccountRef]) (*connect.Response[nodev2.StoreListAPIKeysReply], error) {
	acct := req.Msg.AccountId
	rows, err := g.Store.ListSandboxes(ctx, store.SandboxFilter{AccountID: acct, IncludeDestroyed: true})
	if err != nil {
		return nil, storeErr(err)
	}
	if acct == "" || !slices.ContainsFunc(rows, func(r *store.SandboxRecord) bool { return r.Host == caller(ctx) }) {
		return nil, g.refuse(ctx, "ListAPIKeys", fmt.Errorf("account %q has no sandbox on node %s: %w", acct, caller(ctx), errdefs.ErrNotFound))
	}
	keys, err := g.Store.ListAPIKeys(ctx, acct)
	if err != nil {
		return nil, storeErr(err)
	}
	rep := &nodev2.StoreListAPIKeysReply{}
	for _, k := range keys {
		rep.Keys = append(rep.Keys, nodeapi.APIKeyToWire(k))
	}
	return connect.NewResponse(rep), nil
}
