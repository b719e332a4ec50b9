package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/zeish/zeish/errdefs"
)

// DirWatch follows the changes below a guest directory. Events delivers them
// in batches until the watch ends: Close, the ctx it was opened with, the
// directory going away or the stream breaking; Err then says why (nil after
// Close).
type DirWatch struct {
	cl     *call
	events chan []WatchEvent
	err    error
	closed atomic.Bool
}

// WatchDir starts watching dir (and, when recursive, the directories below
// it) in the guest. An agent too old to watch answers errdefs.ErrInvalidArgument
// with "unknown operation".
func (c *Client) WatchDir(ctx context.Context, dir string, recursive bool) (*DirWatch, error) {
	cl, err := c.start(ctx, request{Op: opWatch, Path: dir, Recursive: recursive})
	if err != nil {
		return nil, err
	}
	kind, _, err := cl.next()
	if err == nil && kind != chunkStarted {
		err = fmt.Errorf("watch: unexpected first chunk %q: %w", kind, errdefs.ErrInternal)
	}
	if err != nil {
		cl.close()
		return nil, err
	}
	w := &DirWatch{cl: cl, events: make(chan []WatchEvent, 16)}
	go w.read()
	return w, nil
}

func (w *DirWatch) read() {
	defer close(w.events)
	for {
		kind, p, err := w.cl.next()
		if err != nil {
			if w.cl.ctx.Err() == nil && !w.closed.Load() {
				w.err = err
			}
			return
		}
		if kind != chunkStdout {
			continue
		}
		var evs []WatchEvent
		if err := json.Unmarshal(p, &evs); err != nil {
			w.err = fmt.Errorf("watch: decode events: %v: %w", err, errdefs.ErrInternal)
			return
		}
		select {
		case w.events <- evs:
		case <-w.cl.ctx.Done():
			return
		}
	}
}

// Events delivers the changes; it is closed when the watch ends.
func (w *DirWatch) Events() <-chan []WatchEvent { return w.events }

// Err says why the watch ended, once Events is closed.
func (w *DirWatch) Err() error { return w.err }

// Close ends the watch in the guest.
func (w *DirWatch) Close() error {
	w.closed.Store(true)
	w.cl.close()
	return nil
}
