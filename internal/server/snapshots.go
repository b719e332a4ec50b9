package server

import (
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/control"
)

// snapshotRef is the snapshot a path names: /snapshots/{id}, or
// /sandboxes/{id}/snapshots/{snapshot} (by id or name).
func snapshotRef(r *http.Request) control.SnapshotRef {
	if snap := r.PathValue("snapshot"); snap != "" {
		return control.SnapshotRef{Sandbox: r.PathValue("id"), Snapshot: snap}
	}
	return control.SnapshotRef{Snapshot: r.PathValue("id")}
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSnapshotRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	snap, err := s.ctl.CreateSnapshot(r.Context(), callerFrom(r.Context()), r.PathValue("id"), req)
	reply(w, r, http.StatusCreated, snap, err)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Snapshots(r.Context(), callerFrom(r.Context()), r.PathValue("id"))
	reply(w, r, http.StatusOK, list, err)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.ctl.Snapshot(r.Context(), callerFrom(r.Context()), snapshotRef(r))
	reply(w, r, http.StatusOK, snap, err)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.ctl.DeleteSnapshot(r.Context(), callerFrom(r.Context()), snapshotRef(r)); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	wait, err := decodeAsync(r, &struct{}{})
	if err != nil {
		writeError(w, r, err)
		return
	}
	snap, sb, err := s.ctl.Restore(r.Context(), callerFrom(r.Context()), snapshotRef(r))
	status := http.StatusAccepted
	if err == nil && wait {
		sb, err = s.ctl.Settled(r.Context(), sb)
		status = http.StatusOK
	}
	reply(w, r, status, api.RestoreResponse{Snapshot: snap, Sandbox: sb}, err)
}
