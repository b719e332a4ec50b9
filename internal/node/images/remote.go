package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/datadir"
	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/vmm"
)

// The remote tier is the image store every node of a cluster shares
// (internal/imagestore, ZEISH_IMAGE_STORE). Unlike the cold tier it holds
// whole images: memory, device state and the frozen disk layer, with the
// image's record, so a node that never had an image can start a VM from
// it. An image is uploaded in the background once it is complete (Publish,
// after the capture: a pause never waits for it) and is durable once its
// manifest is in the store; a marker file in its folder (durableFile)
// records that on the node. Until then it is served from its node only.
// docs/images.md says how it fits together.

const (
	durableFile = "durable" // in an image's folder: the store holds it whole
	// Names of an image's files in the store.
	fileMem   = "mem"
	fileState = "state"
	fileDisk  = "disk"
)

// Remote is a node's view of the shared image store.
type Remote struct {
	Store *imagestore.Store
	// ShmDir is where fetched images' RAM files go (the tmpfs the driver
	// maps guests' RAM from).
	ShmDir string
	// WaitDurable is how long a fetch waits for an image another node is
	// still uploading (a fork's children placed elsewhere wait for the
	// fork's image).
	WaitDurable time.Duration
	// Lazy (nil: none) serves a fetched image's RAM lazily instead of
	// fetching it before the VM starts (internal/node/lazyram).
	Lazy LazyRAM
}

// LazyRAM makes path local file name of image man, served lazily: what
// internal/node/lazyram does with a symlink to a FUSE file.
type LazyRAM interface {
	Map(ctx context.Context, man *imagestore.Manifest, name, local string) error
}

// remote is the store's state of its remote tier.
type remote struct {
	Remote
	mu      sync.Mutex
	uploads map[string]*imagestore.Upload // by image id, in flight
	// attempts counts the failed uploads of an image since its last
	// success, for the wait before the next (uploadFailed).
	attempts map[string]int
	fetches  singleflight.Group
	// fetching counts the fetches in flight by image id: the node claims
	// them (claim.go).
	fetching map[string]int
	// layers caches the disk chain of images known only from the store
	// (manifests never change), for gc's roots.
	layers map[string][]string
}

// HasRemote reports whether the node shares an image store.
func (s *Store) HasRemote() bool { return s.remote != nil }

// Durable reports whether image id is whole in the shared store, as this
// node knows it (its marker; an image fetched from the store is durable).
func (s *Store) Durable(id string) bool {
	_, err := os.Lstat(filepath.Join(s.Dir(id), durableFile))
	return err == nil
}

// portable is an image's record as the store keeps it: no paths, since
// each node keeps its files in its own data dir.
type portable struct {
	ID         string   `json:"id"`
	SandboxID  string   `json:"sandbox_id"`
	MemoryMiB  int      `json:"memory_mib,omitempty"`
	HasVM      bool     `json:"vm,omitempty"`
	HasMem     bool     `json:"mem,omitempty"`
	HasDisk    bool     `json:"disk,omitempty"`
	Layers     []string `json:"layers,omitempty"`
	MergedFrom string   `json:"merged_from,omitempty"`
	Base       string   `json:"base,omitempty"` // the disk's bottom (a template's disk) as its node named it
	// Template and TemplateHash name the template whose base disk Base
	// is: a fetching node finds its own copy through them (older images
	// carry only Base, which holds on nodes that share the path: a
	// built-in's).
	Template     string    `json:"template,omitempty"`
	TemplateHash string    `json:"template_hash,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

// Publish uploads image m to the shared store in the background, as a
// delta of the image below its disk (its RAM's origin, when it was a fork
// child or a restored VM). It returns at once; nothing if the node shares
// no store, the image is not complete or is durable already. A node
// restarted mid-upload publishes again (Resume): the store keeps what was
// stored and the upload goes on from there.
func (s *Store) Publish(m *Meta) {
	r := s.remote
	if r == nil || m == nil || m.Disk == "" || s.Durable(m.ID) {
		return
	}
	if s.inFlight(m.ID) != nil {
		return
	}
	// Before the lock: it may ask for the template's hash.
	spec, err := s.uploadSpec(m)
	if err != nil {
		s.log.Warn("image store: not uploading", "image", m.ID, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uploads[m.ID] != nil {
		return
	}
	// The upload reads the image's files: gc must not take them meanwhile.
	lease := s.Lease(m.ID)
	up := r.Store.StartUpload(context.Background(), spec)
	r.uploads[m.ID] = up
	go func() {
		defer lease.Release()
		began := time.Now()
		man, err := up.Wait()
		r.mu.Lock()
		delete(r.uploads, m.ID)
		r.mu.Unlock()
		if err != nil {
			s.uploadFailed(m.ID, err)
			return
		}
		r.mu.Lock()
		delete(r.attempts, m.ID)
		r.mu.Unlock()
		if err := datadir.WriteFile(filepath.Join(s.Dir(m.ID), durableFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n")); err != nil {
			s.log.Warn("image store: mark durable", "image", m.ID, "err", err)
		}
		p := up.Progress()
		s.log.Info("image durable", "image", m.ID, "parent", spec.Parent, "uploaded_bytes", p.Uploaded+p.Manifest,
			"shared_bytes", p.Shared, "stored_bytes", man.StoredBytes(), "seconds", time.Since(began).Seconds())
	}()
}

// uploadFailed logs a failed upload of image id and, when the store was
// only away (imagestore.Transient), publishes the image again later: a
// capture made while the store was down becomes durable once it is back.
// The retry reads the image anew, so one deleted meanwhile is not retried.
func (s *Store) uploadFailed(id string, err error) {
	r := s.remote
	if !imagestore.Transient(err) {
		s.log.Warn("image store: upload failed; the image is served from this node only", "image", id, "err", err)
		return
	}
	r.mu.Lock()
	r.attempts[id]++
	wait := imagestore.RetryAfter(r.attempts[id])
	r.mu.Unlock()
	s.log.Warn("image store: upload failed; the image is served from this node only until a retry succeeds",
		"image", id, "retry_in", wait, "err", err)
	time.AfterFunc(wait, func() {
		m, err := s.Read(id)
		if err != nil {
			r.mu.Lock()
			delete(r.attempts, id)
			r.mu.Unlock()
			return
		}
		s.Publish(m)
	})
}

// WaitUploaded waits for image id's upload in flight, if any (tests, and
// a fork whose children start elsewhere).
func (s *Store) WaitUploaded(ctx context.Context, id string) error {
	up := s.inFlight(id)
	if up == nil {
		return nil
	}
	select {
	case <-up.Done():
		_, err := up.Wait()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Uploaded is the progress of image id's upload in flight (ok false: none).
func (s *Store) Uploaded(id string) (imagestore.Progress, bool) {
	up := s.inFlight(id)
	if up == nil {
		return imagestore.Progress{}, false
	}
	return up.Progress(), true
}

// inFlight is image id's upload in flight (nil: none, or no store).
func (s *Store) inFlight(id string) *imagestore.Upload {
	r := s.remote
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.uploads[id]
}

// ResumeUploads publishes every complete image that is not durable yet:
// what a restart interrupted.
func (s *Store) ResumeUploads() {
	if s.remote == nil {
		return
	}
	for _, m := range s.All() {
		if m.VM != nil && m.Disk != "" {
			s.Publish(m)
		}
	}
}

func (s *Store) uploadSpec(m *Meta) (imagestore.UploadSpec, error) {
	p := portable{ID: m.ID, SandboxID: m.SandboxID, HasDisk: m.Disk != "", Layers: m.Layers,
		MergedFrom: m.MergedFrom, Template: m.Template, CreatedAt: m.CreatedAt}
	spec := imagestore.UploadSpec{ID: m.ID}
	if len(m.Layers) > 0 {
		spec.Parent = m.Layers[len(m.Layers)-1]
	} else {
		base, err := s.opts.Driver.DiskBacking(m.Disk)
		if err != nil {
			return spec, err
		}
		p.Base = base
		if m.Template != "" && s.opts.Templates != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			p.TemplateHash, err = s.opts.Templates.Hash(ctx, m.Template)
			cancel()
			if err != nil {
				// Uploaded all the same: a node finds the template by its key.
				s.log.Warn("image store: the hash of the template an image stands on is unknown", "image", m.ID, "template", m.Template, "err", err)
			}
		}
	}
	var parent *Meta
	if spec.Parent != "" {
		parent, _ = s.Read(spec.Parent)
		// A merge (internal/node/merge) put a layer without memory below
		// the disk; the VM's RAM still came from the image the merge
		// started at, which is the delta's parent: else a capture after a
		// merge would upload all of its RAM again.
		if parent != nil && parent.VM == nil && parent.MergedFrom != "" {
			if from, err := s.Read(parent.MergedFrom); err == nil && from.VM != nil {
				spec.Parent, parent = from.ID, from
			}
		}
	}
	local := func(path func(*Meta) string) string {
		if parent == nil || parent.VM == nil {
			return ""
		}
		if p := path(parent); p != "" {
			if _, err := os.Lstat(p); err == nil {
				return p
			}
		}
		return ""
	}
	if m.VM != nil {
		p.HasVM, p.MemoryMiB = true, m.VM.MemoryMiB
		spec.Files = append(spec.Files, imagestore.SourceFile{Name: fileState, Path: m.VM.StateFile})
		if m.VM.MemFile != "" {
			p.HasMem = true
			spec.Files = append(spec.Files, imagestore.SourceFile{Name: fileMem, Path: m.VM.MemFile,
				ParentPath: local(func(p *Meta) string { return p.VM.MemFile })})
		}
	}
	spec.Files = append(spec.Files, imagestore.SourceFile{Name: fileDisk, Path: m.Disk})
	b, err := json.Marshal(p)
	spec.Meta = b
	return spec, err
}

// Fetch makes image id local, bringing it from the shared store when the
// node lacks it: whole (memory, state and disk layer) unless layerOnly,
// with the images its disk chain goes through (their layers only). A
// fetched layer is made to name this node's copy of the layer below it.
// progress (nil: none) hears the bytes fetched so far of the whole.
func (s *Store) Fetch(ctx context.Context, id string, layerOnly bool, progress func(done, total int64)) (*Meta, error) {
	if m, err := s.Read(id); err == nil && (layerOnly || m.VM != nil) {
		return m, nil
	}
	r := s.remote
	if r == nil {
		return nil, fmt.Errorf("image %s is not on host %s, and no image store is set (ZEISH_IMAGE_STORE) to fetch it from: %w",
			id, s.opts.Host, errdefs.ErrNotFound)
	}
	key := id
	if layerOnly {
		key += " layer"
	}
	v, err, _ := r.fetches.Do(key, func() (any, error) {
		// Claimed before its manifest is read, so no sweep deletes it
		// from under the fetch and the images that will stand on it.
		done, err := s.claimFetch(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("image %s: claim it in the image store %s: %w", id, r.Store, err)
		}
		defer done()
		return s.fetch(ctx, id, layerOnly, progress)
	})
	if err != nil {
		return nil, err
	}
	return v.(*Meta), nil
}

func (s *Store) fetch(ctx context.Context, id string, layerOnly bool, progress func(done, total int64)) (*Meta, error) {
	r := s.remote
	man, p, err := s.stored(ctx, id)
	if err != nil {
		return nil, err
	}
	// The layers below first: this one's disk is made to name them.
	for _, l := range p.Layers {
		if _, err := s.Fetch(ctx, l, true, nil); err != nil {
			return nil, fmt.Errorf("image %s: layer %s: %w", id, l, err)
		}
	}
	backing, err := s.backing(ctx, p)
	if err != nil {
		return nil, err
	}
	// A lease: gc must not take the folder while it is made.
	lease := s.Lease(id)
	defer lease.Release()
	m, err := s.Read(id) // a layer fetched before, now wanted whole
	fresh := err != nil
	if fresh {
		m = &Meta{ID: id, SandboxID: p.SandboxID, Layers: p.Layers, MergedFrom: p.MergedFrom, Template: p.Template, CreatedAt: p.CreatedAt}
	}
	want := []string{}
	if fresh && p.HasDisk {
		want = append(want, fileDisk)
	}
	if !layerOnly && p.HasVM {
		want = append(want, fileState)
		if p.HasMem {
			want = append(want, fileMem)
		}
	}
	var total, done int64
	for _, name := range want {
		if f, ok := man.File(name); ok {
			total += f.Size
		}
	}
	dir := s.Dir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fetchErr(err)
	}
	var made []string
	undo := func() {
		for _, f := range made {
			os.Remove(f)
		}
		if fresh {
			os.RemoveAll(dir)
		}
	}
	vm := &vmm.Image{Dir: dir, MemoryMiB: p.MemoryMiB}
	began := time.Now()
	for _, name := range want {
		var dst string
		switch name {
		case fileDisk:
			dst = s.LayerPath(id)
		case fileState:
			dst = filepath.Join(dir, "state.bin")
			vm.StateFile = dst
		case fileMem:
			dst = filepath.Join(r.ShmDir, "zeish-img-"+id+".mem")
			vm.MemFile = dst
		}
		if name == fileMem && r.Lazy != nil {
			// The RAM last (want's order): the VM starts once the disk
			// and the device state are here, its pages come on touch.
			err := r.Lazy.Map(ctx, man, name, dst)
			if err == nil {
				made = append(made, dst)
				if f, ok := man.File(name); ok {
					done += f.Size
				}
				if progress != nil {
					progress(done, total)
				}
				s.log.Info("image RAM served lazily", "image", id, "file", dst)
				continue
			}
			s.log.Warn("image RAM cannot be served lazily; fetching it whole", "image", id, "err", err)
		}
		if err := r.Store.FetchFile(ctx, man, name, dst); err != nil {
			undo()
			return nil, fmt.Errorf("fetch image %s from %s: %w", id, r.Store, fetchErr(err))
		}
		made = append(made, dst)
		if f, ok := man.File(name); ok {
			done += f.Size
		}
		if progress != nil {
			progress(done, total)
		}
		if name == fileDisk {
			if err := s.opts.Driver.Relink(ctx, dst, backing); err != nil {
				undo()
				return nil, fmt.Errorf("image %s: %w", id, err)
			}
			ReadOnly(dst)
			m.Disk = dst
		}
	}
	if !layerOnly && p.HasVM {
		m.VM = vm
	}
	if err := s.Write(m); err != nil {
		undo()
		return nil, fetchErr(err)
	}
	if p.HasVM && (!layerOnly || m.VM != nil) {
		// Fetched whole from the store: it is durable.
		datadir.WriteFile(filepath.Join(dir, durableFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"))
	}
	s.log.Info("image fetched", "image", id, "files", want, "bytes", done, "seconds", time.Since(began).Seconds())
	return m, nil
}

// backing is this node's file that image p's disk layer stands on: the
// layer below it in its chain (fetched already), or, at the bottom, this
// node's copy of the template it names; an older image, which names no
// template, stands on the path its node recorded.
func (s *Store) backing(ctx context.Context, p *portable) (string, error) {
	if len(p.Layers) > 0 {
		return s.LayerPath(p.Layers[len(p.Layers)-1]), nil
	}
	if p.Template != "" && s.opts.Templates != nil {
		disk, hash, err := s.opts.Templates.Disk(ctx, p.Template)
		if err != nil {
			return "", fmt.Errorf("image %s stands on template %s: %w", p.ID, p.Template, err)
		}
		if p.TemplateHash != "" && hash != p.TemplateHash {
			// A layer read over another base disk reads garbage.
			return "", fmt.Errorf("image %s stands on template %s of hash %s, and host %s has it at hash %s: %w",
				p.ID, p.Template, p.TemplateHash, s.opts.Host, hash, errdefs.ErrUnavailable)
		}
		return disk, nil
	}
	if _, err := os.Stat(p.Base); err != nil {
		return "", fmt.Errorf("image %s stands on disk %s, which host %s does not have: %w", p.ID, p.Base, s.opts.Host, errdefs.ErrUnavailable)
	}
	return p.Base, nil
}

// manifest reads image id's manifest, waiting up to WaitDurable for an
// upload in flight elsewhere.
func (s *Store) manifest(ctx context.Context, id string) (*imagestore.Manifest, error) {
	r := s.remote
	deadline := time.Now().Add(r.WaitDurable)
	for {
		man, err := r.Store.Manifest(ctx, id)
		if err == nil || !errdefs.Is(err, errdefs.ClassNotFound) || !time.Now().Before(deadline) {
			if errdefs.Is(err, errdefs.ClassNotFound) {
				return nil, fmt.Errorf("image %s is not on host %s and not (yet) durable in the image store: %w", id, s.opts.Host, errdefs.ErrNotFound)
			}
			if err != nil {
				return nil, fmt.Errorf("image %s: the image store %s: %w", id, r.Store, err)
			}
			return man, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// InRemote reports whether image id is durable in the shared store.
func (s *Store) InRemote(ctx context.Context, id string) (bool, error) {
	if s.remote == nil {
		return false, nil
	}
	return s.remote.Store.Durable(ctx, id)
}

// RemoteLayers is the disk chain of image id as the shared store records
// it (for gc's roots of images this node does not hold).
func (s *Store) RemoteLayers(ctx context.Context, id string) ([]string, error) {
	r := s.remote
	if r == nil {
		return nil, nil
	}
	r.mu.Lock()
	l, ok := r.layers[id]
	r.mu.Unlock()
	if ok {
		return l, nil
	}
	layers, err := StoredLayers(ctx, r.Store, id)
	if err != nil || layers == nil { // not in the store (yet): not cached
		return layers, err
	}
	r.mu.Lock()
	r.layers[id] = layers
	r.mu.Unlock()
	return layers, nil
}

// uploading reports whether image id's upload is reading its folder.
func (s *Store) uploading(id string) bool {
	return s.remote != nil && s.inFlight(id) != nil
}

// StoredLayers is the disk chain image id stands on, as the image store
// holds it (nil: not in the store): a control plane, which has no image
// folders, reads a snapshot's chain with it.
func StoredLayers(ctx context.Context, st *imagestore.Store, id string) ([]string, error) {
	man, err := st.Manifest(ctx, id)
	if errdefs.Is(err, errdefs.ClassNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p portable
	if err := json.Unmarshal(man.Meta, &p); err != nil {
		return nil, err
	}
	return p.Layers, nil
}

// fetchErr classes a local failure of a fetch: a full disk is storage_full.
func fetchErr(err error) error {
	if errdefs.Of(err) == errdefs.ErrStorageFull || errors.Is(err, errdefs.ErrStorageFull) {
		return err
	}
	if isFull(err) {
		return fmt.Errorf("%w: %w", err, errdefs.ErrStorageFull)
	}
	return err
}

func isFull(err error) bool { return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) }

// Chain is the disk chain a disk standing on image id's layer goes
// through: from this node's record of it or, when the node lacks it, from
// the image store's (waiting, as a fetch does, for an upload in flight
// elsewhere), before the image is fetched.
func (s *Store) Chain(ctx context.Context, id string) ([]string, error) {
	if m, err := s.Read(id); err == nil {
		return m.Chain(), nil
	}
	if s.remote == nil {
		return nil, fmt.Errorf("image %s is not on host %s, and no image store is set (ZEISH_IMAGE_STORE) to fetch it from: %w",
			id, s.opts.Host, errdefs.ErrNotFound)
	}
	_, p, err := s.stored(ctx, id)
	if err != nil {
		return nil, err
	}
	return append(append([]string(nil), p.Layers...), id), nil
}

// stored reads image id's manifest and its record in the store.
func (s *Store) stored(ctx context.Context, id string) (*imagestore.Manifest, *portable, error) {
	man, err := s.manifest(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	p := new(portable)
	if err := json.Unmarshal(man.Meta, p); err != nil || p.ID != id {
		return nil, nil, fmt.Errorf("image %s: its record in the store is unreadable (%v): %w", id, err, errdefs.ErrInternal)
	}
	return man, p, nil
}
