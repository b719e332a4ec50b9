package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/zeish/zeish/vmm"
)

// A Tier keeps a copy of images' memory away from the tmpfs a VM maps it
// from. The cold tier (cold.go: this host's data-dir disk) is one; a
// remote object store, from which another node fetches an image, is meant
// to plug in beside it (Options.Tiers). The store asks its tiers, in
// order, to bring back the memory of an image a VM is about to start from
// and that is no longer in tmpfs, and tells each when gc releases an
// image's memory.
//
// What a remote tier adds is whose job it is: Put is the upload (in the
// background, once an image is complete; chunks and their addresses are
// the tier's business), Fetch the download on a miss, Drop the delete. An
// image another node captured has no folder here at all: bringing back
// its record and layer too is for that tier to add to this interface.
type Tier interface {
	// Name names the tier in logs.
	Name() string
	// Put copies image m's memory (its RAM file, in tmpfs) into the tier,
	// whole or not at all; the tmpfs copy stays.
	Put(ctx context.Context, m *Meta) error
	// Fetch copies the tier's copy of the image img belongs to back to
	// img.MemFile, whole or not at all. An error wrapping fs.ErrNotExist
	// says the tier holds none.
	Fetch(ctx context.Context, img *vmm.Image) error
	// Drop forgets the tier's copy of image id's memory, if it holds one.
	Drop(id string) error
}

// Thaw makes sure the RAM file of img (an image a VM is about to start
// from) is in tmpfs, bringing it back from the first tier that holds it.
// The caller holds a lease on the image, so it cannot go cold again
// before the VM maps it.
func (s *Store) Thaw(ctx context.Context, img *vmm.Image) error {
	if img == nil || img.MemFile == "" {
		return nil
	}
	// A thaw waits for a move in progress (and a move for a thaw).
	s.cold.mu.Lock()
	defer s.cold.mu.Unlock()
	if _, err := os.Lstat(img.MemFile); err == nil {
		return nil
	}
	var missing []error
	var names []string
	for _, t := range s.tiers {
		err := t.Fetch(ctx, img)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing, names = append(missing, err), append(names, t.Name())
	}
	return fmt.Errorf("image %s: its memory is neither in %s nor in a tier (%s): %w",
		filepath.Base(img.Dir), filepath.Dir(img.MemFile), strings.Join(names, ", "), errors.Join(missing...))
}
