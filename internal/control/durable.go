package control

import (
	"context"
	"sync"
	"time"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// ImageDurability says whether an image is whole in the image store the
// nodes share (*imagestore.Store has it).
type ImageDurability interface {
	Durable(ctx context.Context, id string) (bool, error)
}

// durableSeen remembers images found durable: an image is never changed,
// and deleted only once nothing shows it, so a yes stays true.
var durableSeen sync.Map

// durable is whether image id is whole in the image store: nil without
// one, or when the store does not answer in time (unknown, not false).
func (c *Control) durable(ctx context.Context, id string) *bool {
	if c.images == nil || id == "" {
		return nil
	}
	yes := true
	if _, ok := durableSeen.Load(id); ok {
		return &yes
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ok, err := c.images.Durable(ctx, id)
	if err != nil {
		c.log.Warn("image store: durability unknown", "image", id, "err", err)
		return nil
	}
	if ok {
		durableSeen.Store(id, true)
	}
	return &ok
}

// snapshotView is a snapshot as a client sees it: with its durability.
func (c *Control) snapshotView(ctx context.Context, snap *store.SnapshotRecord) sandbox.Snapshot {
	out := snap.Snapshot
	out.Durable = c.durable(ctx, snap.Image)
	return out
}
