package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/node/images"
	"github.com/zeish/zeish/internal/rollback"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// A sandbox whose RAM is an image's (a fork child, a parent that ran on
// after a fork, a restored sandbox) cannot be captured by saving its device
// state: its memory is a private copy-on-write view of another file. It is
// captured live instead (vmm.Driver.CaptureLive): its RAM is copied into a
// new image while it runs, and it pauses only to switch over, for a time
// that does not grow with its memory. It runs on in the same VM, on a new
// overlay over the disk frozen at that instant, which becomes the image's
// layer. Nothing of it is replaced, so its agent connection stays.
//
// Crash safety: a journal in the sandbox's folder names the image and the
// disk swap before anything starts. A zeishd that dies mid-capture finds it
// at Recover, which lets the driver settle the VM (migration cancelled, the
// guest running again, helpers gone) and then records the disk swap if it
// happened (the frozen layer kept as a disk-only image) or removes the
// image. The image folder is leased meanwhile, so gc never takes it.

const captureJournal = "capture.json"

// liveJournal is what a live capture in progress has to be finished from.
type liveJournal struct {
	Image   string       `json:"image"`
	OldDisk string       `json:"old_disk"`
	Swap    vmm.DiskSwap `json:"swap"`
	Run     bool         `json:"run"` // the guest ran when the capture began
}

func (n *Node) journalPath(id string) string { return filepath.Join(n.sandboxDir(id), captureJournal) }

func (n *Node) writeJournal(id string, j liveJournal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	// Synced (Recover acts on it after a crash) and never through a link.
	return datadir.WriteFile(n.journalPath(id), b)
}

// captureLive captures r's VM h, whose RAM is not its own, while it runs on.
func (n *Node) captureLive(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle, wasPaused bool) (_ *captured, err error) {
	var (
		dir   string
		lease *images.Lease
		j     = liveJournal{OldDisk: h.Disk, Run: !wasPaused}
		meta  *images.Meta
		pause time.Duration
	)
	defer func() {
		if err != nil {
			lease.Release()
		}
	}()
	err = rollback.Run(ctx,
		n.newImage(&j.Image, &dir, &lease),
		rollback.Step{Name: "generation", Do: func(ctx context.Context, _ *rollback.Stack) error {
			r.Gen++
			_, err := n.opts.Store.UpdateSandbox(context.WithoutCancel(ctx), r.ID, func(cur *store.SandboxRecord) error {
				cur.Gen = r.Gen
				return nil
			})
			return err
		}},
		rollback.Step{Name: "journal", Do: func(ctx context.Context, _ *rollback.Stack) error {
			j.Swap = vmm.DiskSwap{Frozen: n.images.LayerPath(j.Image), Next: n.diskPath(r.ID, r.Gen)}
			return n.writeJournal(r.ID, j)
		}},
		rollback.Step{Name: "capture", Do: func(ctx context.Context, undo *rollback.Stack) error {
			// From here the journal decides what becomes of the image: kept
			// as the frozen layer if the disk swapped, removed if not.
			undo.Release()
			img, p, err := n.opts.Driver.CaptureLive(ctx, h, dir, j.Swap)
			m, rerr := n.recordSwap(ctx, r, h, j, img)
			meta, pause = m, p
			return errors.Join(err, rerr)
		}},
	)
	if err != nil {
		return nil, err
	}
	n.log.Info("captured live", logSandbox, r.ID, "image", j.Image, "pause_ms", pause.Milliseconds())
	return &captured{image: meta, pause: pause, lease: lease}, nil
}

// recordSwap persists the outcome of a live capture (finished, failed or
// settled after a crash): if the VM now writes j.Swap.Next, its old overlay
// is the image's frozen layer, which its disk chain goes through from now
// on (img, when complete, is the image's memory and state); otherwise the
// image is dropped. The journal goes last.
func (n *Node) recordSwap(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle, j liveJournal, img *vmm.Image) (*images.Meta, error) {
	dir := n.images.Dir(j.Image)
	if h == nil || h.Disk != j.Swap.Next {
		os.RemoveAll(dir)
		os.Remove(n.journalPath(r.ID))
		return nil, nil
	}
	meta := &images.Meta{ID: j.Image, SandboxID: r.ID, Template: r.Template, CreatedAt: time.Now().UTC(), VM: img, Disk: j.Swap.Frozen,
		Layers: append([]string(nil), r.Layers...)}
	if i := slices.Index(r.Layers, j.Image); i >= 0 {
		meta.Layers = append([]string(nil), r.Layers[:i]...) // recorded before the crash
	}
	images.ReadOnly(j.Swap.Frozen)
	if err := n.images.Write(meta); err != nil {
		return nil, fmt.Errorf("record image %s: %w", j.Image, err)
	}
	r.Disk, r.DiskBase = h.Disk, ""
	r.Layers = append(append([]string(nil), meta.Layers...), j.Image)
	writeHandleFile(h.Spec.Dir, h)
	if err := n.saveVM(ctx, r, h); err != nil {
		return nil, err
	}
	if j.OldDisk != "" && j.OldDisk != j.Swap.Next {
		os.Remove(j.OldDisk) // the frozen layer keeps its data under the image's name
	}
	os.Remove(n.journalPath(r.ID))
	return meta, nil
}

// settleCapture finishes a live capture that zeishd did not see through.
func (n *Node) settleCapture(ctx context.Context, r *store.SandboxRecord, h *vmm.Handle) {
	b, err := os.ReadFile(n.journalPath(r.ID))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var j liveJournal
	if err == nil {
		err = json.Unmarshal(b, &j)
	}
	if err != nil || j.Image == "" {
		n.log.Error("recover: unreadable capture journal", logSandbox, r.ID, "err", err)
		os.Remove(n.journalPath(r.ID))
		return
	}
	log := n.log.With(logSandbox, r.ID, "image", j.Image)
	if h != nil {
		run := j.Run && r.State != sandbox.StatePaused
		if err := n.opts.Driver.SettleCapture(ctx, h, n.images.Dir(j.Image), j.Swap, run); err != nil {
			log.Error("recover: settle live capture", "err", err)
		}
	}
	// The image's memory was removed with the capture's helpers: whatever
	// the capture got to, only its disk layer can matter now.
	if _, err := n.recordSwap(ctx, r, h, j, nil); err != nil {
		log.Error("recover: record live capture", "err", err)
		return
	}
	log.Info("recover: live capture settled", "disk_swapped", h != nil && h.Disk == j.Swap.Next)
}
