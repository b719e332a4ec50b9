package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Card-less warm images. A warm image holds a machine with a network card
// (the node's kind: a TAP, or a user-mode card on a node without
// networking), and QEMU loads a machine's state only into a machine with
// the same devices: a sandbox with `network: {enabled: false}`, which has
// no card at all, cannot start from it and would boot cold. So once such
// a sandbox is created from a warm template, the ready pool (ready.go)
// builds the template a second image the same way on a machine without a
// card, and from then on such creates start from that one (and take ready
// VMs launched from it).
//
// The second image is the node's own: the template's record does not name
// it. The warm image names it as its twin (images.Store.Twin), so it lives
// exactly as long as the warm image it was made beside: gc keeps it while
// the template is warm with that image, and a rebuilt or deleted template
// leaves it to gc like any image no record needs.

const (
	cardlessSuffix = "-cardless"
)

// whyNoCardless is why a card-less create of a warm template boots cold
// until the pool has made the template's card-less image.
const whyNoCardless = "it has no network card and the warm image has one; the template's image without one is not made (yet)"

// cardlessRecord says whether sandbox r has no network card.
func cardlessRecord(r *store.SandboxRecord) bool {
	return r.Network != nil && !r.Network.Enabled
}

// cardlessBuilds remembers the warm images whose card-less twin failed to
// build (a template whose start or ready command needs the network, say):
// not tried again for that image, since each try is a whole warm build;
// until zeishd restarts, its card-less creates boot cold.
type cardlessBuilds struct {
	mu     sync.Mutex
	failed map[string]error // by warm image
}

// build runs make for tpl unless it failed before for tpl's warm image.
func (b *cardlessBuilds) build(ctx context.Context, tpl sandbox.Template, make func(context.Context, sandbox.Template) error) error {
	if err := b.failedFor(tpl.Warm.Image); err != nil {
		return fmt.Errorf("not tried again: %w", err)
	}
	err := make(ctx, tpl)
	if err != nil && ctx.Err() == nil {
		b.mu.Lock()
		if b.failed == nil {
			b.failed = map[string]error{}
		}
		b.failed[tpl.Warm.Image] = err
		b.mu.Unlock()
	}
	return err
}

// failedFor is why the card-less build beside warm image failed (nil: it
// did not).
func (b *cardlessBuilds) failedFor(image string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failed[image]
}

// cardlessImage is tpl's card-less warm image.
func (n *Node) cardlessImage(tpl sandbox.Template) (*images.Meta, error) {
	if tpl.Warm == nil {
		return nil, fmt.Errorf("template %s is not warm", tpl.ID)
	}
	id := n.images.Twin(tpl.Warm.Image)
	if id == "" {
		return nil, fmt.Errorf("template %s has no card-less image", tpl.ID)
	}
	return n.images.ReadMachine(id)
}

// makeCardless builds tpl's card-less warm image and names it in the warm
// image's folder. The build is a warm build like the template's own (its
// start and ready commands run again), at the same size.
func (n *Node) makeCardless(ctx context.Context, tpl sandbox.Template) error {
	if size := WarmSize(tpl); size.VCPUs != tpl.Warm.VCPUs || size.MemoryMiB != tpl.Warm.MemoryMiB || size.DiskMiB != tpl.Warm.DiskMiB {
		return fmt.Errorf("template %s asks for another size than its warm image's", tpl.ID)
	}
	w, err := n.warmBuild(ctx, tpl, true, func(string) {})
	if err != nil {
		return fmt.Errorf("card-less warm build: %w", err)
	}
	// Leased until named: gc reads the name.
	defer w.lease.Release()
	if err := n.images.SetTwin(tpl.Warm.Image, w.meta.ID); err != nil {
		return fmt.Errorf("name the card-less image: %w", err) // gc takes it
	}
	n.log.Info("template warmed without a network card", "template", tpl.ID, "image", w.meta.ID, "beside", tpl.Warm.Image,
		"ms", time.Since(w.started).Milliseconds())
	return nil
}
