package node

import (
	"context"
	"sync"
)

// watcher wakes everyone waiting on a sandbox when its state changes.
type watcher struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newWatcher() *watcher { return &watcher{ch: map[string]chan struct{}{}} }

// changed returns a channel closed at the sandbox's next change.
func (w *watcher) changed(id string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ch[id]
	if !ok {
		c = make(chan struct{})
		w.ch[id] = c
	}
	return c
}

func (w *watcher) notify(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.ch[id]; ok {
		close(c)
		delete(w.ch, id)
	}
}

// Changed returns a channel closed at sandbox id's next state change (for
// waiters and event streams).
func (n *Node) Changed(id string) <-chan struct{} { return n.watch.changed(id) }

// waitChange blocks until id changes or ctx ends.
func (n *Node) waitChange(ctx context.Context, id string, c <-chan struct{}) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
