package server

import (
	"fmt"
	"net/http"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// checkSnapshotName: 1-64 printable characters.
func checkSnapshotName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > 64 || !utf8.ValidString(name) {
		return invalid("snapshot name %q: want 1-64 printable characters", name)
	}
	for _, c := range name {
		if !unicode.IsPrint(c) {
			return invalid("snapshot name %q: character %U is not printable", name, c)
		}
	}
	return nil
}

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
	if req.Name == "" {
		req.Name = "snapshot-" + time.Now().UTC().Format("20060102-150405")
	}
	if err := checkSnapshotName(req.Name); err != nil {
		writeError(w, r, err)
		return
	}
	rec, err := s.ownSandbox(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	snap, err := s.node.CreateSnapshot(r.Context(), rec.ID, req.Name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap.Snapshot)
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
		out.Snapshots = append(out.Snapshots, x.Snapshot)
	}
	writeJSON(w, http.StatusOK, out)
}

// ownSnapshot loads the snapshot in the path if it is the caller's.
func (s *Server) ownSnapshot(r *http.Request) (*store.SnapshotRecord, error) {
	id := r.PathValue("id")
	if err := sandbox.CheckID(sandbox.PrefixSnapshot, id); err != nil {
		return nil, err
	}
	snap, err := s.store.GetSnapshot(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if snap.AccountID != accountFrom(r.Context()).ID {
		return nil, fmt.Errorf("snapshot %s not found: %w", id, errdefs.ErrNotFound)
	}
	return snap, nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.ownSnapshot(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snap.Snapshot)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.ownSnapshot(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.node.DeleteSnapshot(r.Context(), snap.ID); err != nil {
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
	snap, rec, err := s.node.Restore(r.Context(), snap.ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rec, status, err := s.settle(r, rec, wait)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, status, api.RestoreResponse{Snapshot: snap.Snapshot, Sandbox: s.view(rec)})
}
