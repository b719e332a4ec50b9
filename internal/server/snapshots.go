package server

import (
	"net/http"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSnapshotRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.IncludeRAM != nil && !*req.IncludeRAM {
		writeError(w, r, invalid("include_ram: snapshots always include memory; a sandbox is only restored from a saved memory image"))
		return
	}
	// Empty: the node names it (sandbox.DefaultSnapshotName), knowing the
	// sandbox's other snapshots.
	if req.Name != "" {
		if err := sandbox.CheckSnapshotName(req.Name); err != nil {
			writeError(w, r, err)
			return
		}
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	snap, err := s.control.Snapshot(r.Context(), rec, req.Name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.snapshotView(r.Context(), snap))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	snaps, err := s.store.ListSnapshots(r.Context(), rec.ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.SnapshotList{Snapshots: []sandbox.Snapshot{}}
	for _, x := range snaps {
		out.Snapshots = append(out.Snapshots, s.snapshotView(r.Context(), x))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.ownSnapshot(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.snapshotView(r.Context(), snap))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.ownSnapshot(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.control.DeleteSnapshot(r.Context(), snap); err != nil {
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
	snap, err := s.ownSnapshot(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, err := s.store.GetSandbox(r.Context(), snap.SandboxID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	snap, rec, err = s.control.Restore(r.Context(), rec, snap)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, status, err := s.settle(r, rec, wait)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, status, api.RestoreResponse{Snapshot: s.snapshotView(r.Context(), snap), Sandbox: s.view(rec)})
}
