package server

import (
	"fmt"
	"net/http"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Every {id} of a sandbox in the public API takes its id or its name (unique
// per account among sandboxes not destroyed); an id always wins. Snapshots
// are found by name only where the route names their sandbox.

// ownSandbox loads the sandbox named in the path if it belongs to the caller's
// account; another account's sandbox is indistinguishable from none.
func (s *Server) ownSandbox(r *http.Request) (*store.SandboxRecord, error) {
	ref := r.PathValue("id")
	acct := accountFrom(r.Context()).ID
	if sandbox.IsID(sandbox.PrefixSandbox, ref) {
		rec, err := s.store.GetSandbox(r.Context(), ref)
		if err != nil {
			return nil, storeErr(err)
		}
		if rec.AccountID != acct {
			return nil, fmt.Errorf("sandbox %s not found: %w", ref, errdefs.ErrNotFound)
		}
		return rec, nil
	}
	if sandbox.CheckName(ref) != nil {
		return nil, fmt.Errorf("%q is neither a sandbox id (sbx_ and 20 characters) nor a sandbox name: %w", ref, errdefs.ErrInvalidArgument)
	}
	rec, err := s.store.SandboxByName(r.Context(), acct, ref)
	return rec, storeErr(err)
}

// ownSnapshot loads the snapshot in the path if it is the caller's: by id,
// or, under a sandbox's route, by id or name within that sandbox.
func (s *Server) ownSnapshot(r *http.Request) (*store.SnapshotRecord, error) {
	if r.PathValue("snapshot") != "" {
		return s.sandboxSnapshot(r)
	}
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

// sandboxSnapshot is /sandboxes/{id}/snapshots/{snapshot}.
func (s *Server) sandboxSnapshot(r *http.Request) (*store.SnapshotRecord, error) {
	rec, err := s.ownSandbox(r)
	if err != nil {
		return nil, err
	}
	ref := r.PathValue("snapshot")
	if sandbox.IsID(sandbox.PrefixSnapshot, ref) {
		snap, err := s.store.GetSnapshot(r.Context(), ref)
		if err != nil {
			return nil, err
		}
		if snap.SandboxID != rec.ID {
			return nil, fmt.Errorf("sandbox %s has no snapshot %s: %w", rec.ID, ref, errdefs.ErrNotFound)
		}
		return snap, nil
	}
	if err := sandbox.CheckSnapshotName(ref); err != nil {
		return nil, err
	}
	return s.store.SnapshotByName(r.Context(), rec.ID, ref)
}
