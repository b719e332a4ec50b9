package e2b

import (
	"context"
	"github.com/zeish/zeish/internal/control"
	"net/http"
	"net/url"
	"strings"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

// E2B's snapshots seed new sandboxes: Sandbox.create(snapshotID) starts a
// sandbox from one. They are zeish's snapshots: createSnapshot takes one
// (the sandbox pauses only for the capture), create with a snapshot id as
// the template clones from it (POST …/snapshots/{snapshot}/clone: a fork
// child of the sandbox as it was), and deleteSnapshot deletes it. One
// difference: a zeish snapshot belongs to its sandbox and goes with it,
// where E2B's outlive theirs.

// snapshotBody is E2B's SnapshotInfo.
func snapshotBody(s sandbox.Snapshot) map[string]any {
	return map[string]any{"snapshotID": s.ID, "names": []string{s.Name}}
}

func isSnapshotID(id string) bool { return strings.HasPrefix(id, sandbox.PrefixSnapshot) }

// createSnapshot takes a zeish snapshot of the sandbox (named as asked, or
// by zeish's default).
func (f *Facade) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	var snap sandbox.Snapshot
	if err == nil {
		snap, err = f.app.CreateSnapshot(r.Context(), callerFrom(r.Context()), sb.ID, api.CreateSnapshotRequest{Name: req.Name})
	}
	if err != nil {
		f.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotBody(snap))
}

// listSnapshots lists the account's snapshots, or one sandbox's.
func (f *Facade) listSnapshots(w http.ResponseWriter, r *http.Request) {
	var boxes []sandbox.Sandbox
	if id := r.URL.Query().Get("sandboxID"); id != "" {
		sb, err := f.lookup(r.Context(), id)
		if err != nil {
			f.fail(w, err)
			return
		}
		boxes = []sandbox.Sandbox{sb}
	} else {
		all, err := f.all(r.Context())
		if err != nil {
			f.fail(w, err)
			return
		}
		boxes = all
	}
	out := []map[string]any{}
	name := r.URL.Query().Get("name")
	for _, sb := range boxes {
		snaps, err := f.snapshotsOf(r.Context(), sb.ID)
		if err != nil {
			f.fail(w, err)
			return
		}
		for _, s := range snaps {
			if name == "" || s.Name == name {
				out = append(out, snapshotBody(s))
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Facade) snapshotsOf(ctx context.Context, id string) ([]sandbox.Snapshot, error) {
	list, err := f.app.Snapshots(ctx, callerFrom(ctx), id)
	return list.Snapshots, err
}

// deleteTemplate deletes an E2B snapshot (a zeish snapshot by id). zeish's
// templates are not E2B's to delete: 404, which the SDK's deleteSnapshot
// reads as false.
func (f *Facade) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !isSnapshotID(id) {
		writeError(w, http.StatusNotFound, "no snapshot or template "+url.PathEscape(id)+" that E2B's API may delete")
		return
	}
	if err := f.app.DeleteSnapshot(r.Context(), callerFrom(r.Context()), control.SnapshotRef{Snapshot: id}); err != nil {
		f.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fromSnapshot starts a sandbox from a snapshot (Sandbox.create(snapshotID)).
func (f *Facade) fromSnapshot(ctx context.Context, snapID string) (sandbox.Sandbox, error) {
	who := callerFrom(ctx)
	snap, err := f.app.Snapshot(ctx, who, control.SnapshotRef{Snapshot: snapID})
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	resp, err := f.app.CloneSnapshot(ctx, who, snap.SandboxID, snap.ID, api.CloneRequest{})
	if err == nil {
		resp.Sandboxes, err = f.app.SettledAll(ctx, resp.Sandboxes)
	}
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if len(resp.Sandboxes) != 1 {
		return sandbox.Sandbox{}, &answer{status: http.StatusInternalServerError, message: "clone from snapshot made no sandbox"}
	}
	return resp.Sandboxes[0], nil
}
