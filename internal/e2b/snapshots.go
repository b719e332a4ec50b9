package e2b

import (
	"net/http"
	"net/url"
)

// E2B's snapshots are templates: a snapshot of a sandbox seeds new
// sandboxes (Sandbox.create(snapshotID)) and outlives it. zeish's snapshots
// roll their own sandbox back in place, and zeish cannot start a new
// sandbox from one, so the facade does not pretend: creating an E2B
// snapshot is refused with 501 and what to use instead (fork, or zeish's
// snapshots), none are listed, and deleting one finds nothing.

const snapshotsUnsupported = "snapshots that seed new sandboxes are not supported by zeish: " +
	"use sandbox.fork() for copies of a running sandbox, or zeish's own snapshots " +
	"(POST /api/v1/public/sandboxes/{id}/snapshots, then …/restore) to roll a sandbox back in place"

// createSnapshot: an unknown sandbox is 404 (SandboxNotFoundError), any
// other 501.
func (f *Facade) createSnapshot(w http.ResponseWriter, r *http.Request) {
	if _, err := f.lookup(r.Context(), r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	writeError(w, http.StatusNotImplemented, snapshotsUnsupported)
}

// listSnapshots: there are no E2B snapshots on zeish.
func (f *Facade) listSnapshots(w http.ResponseWriter, r *http.Request) {
	if _, err := f.backend.Authenticate(r.Context(), r.Context().Value(keyCtx{}).(string)); err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	if id := r.URL.Query().Get("sandboxID"); id != "" {
		if _, err := f.lookup(r.Context(), id); err != nil {
			fail(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, []any{})
}

// deleteTemplate deletes an E2B snapshot or template: zeish has none that
// E2B's API may delete (its templates are built in or made through its
// own API), so the answer is 404, which the SDK's deleteSnapshot reads as
// false.
func (f *Facade) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if _, err := f.backend.Authenticate(r.Context(), r.Context().Value(keyCtx{}).(string)); err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	writeError(w, http.StatusNotFound, "no snapshot or template "+url.PathEscape(r.PathValue("id"))+" that E2B's API may delete")
}
