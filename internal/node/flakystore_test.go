package node

import (
	"context"
	"fmt"
	"sync"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/vmm/vmmfake"
)

// flakyStore is a store whose writes can be made to fail once, at the nth
// call from now, as a store outage would (the error wraps
// vmmfake.ErrInjected, like the driver's injected failures).
type flakyStore struct {
	store.Store
	mu    sync.Mutex
	calls map[string]int
	fails map[string]int // method → the call that fails
}

func newFlakyStore(st store.Store) *flakyStore {
	return &flakyStore{Store: st, calls: map[string]int{}, fails: map[string]int{}}
}

// failNth makes the nth call of method from now fail.
func (s *flakyStore) failNth(method string, nth int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails[method] = s.calls[method] + nth
}

func (s *flakyStore) enter(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	if s.fails[method] == s.calls[method] {
		delete(s.fails, method)
		return fmt.Errorf("store %s: %w", method, vmmfake.ErrInjected)
	}
	return nil
}

func (s *flakyStore) CreateSandboxes(ctx context.Context, rs ...*store.SandboxRecord) error {
	if err := s.enter("CreateSandboxes"); err != nil {
		return err
	}
	return s.Store.CreateSandboxes(ctx, rs...)
}

func (s *flakyStore) CreateSnapshot(ctx context.Context, snap *store.SnapshotRecord, limit int) error {
	if err := s.enter("CreateSnapshot"); err != nil {
		return err
	}
	return s.Store.CreateSnapshot(ctx, snap, limit)
}

func (s *flakyStore) DeleteSnapshot(ctx context.Context, id string) error {
	if err := s.enter("DeleteSnapshot"); err != nil {
		return err
	}
	return s.Store.DeleteSnapshot(ctx, id)
}
