package catalog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// debianBuild shares one build of the debian template between callers.
type debianBuild struct {
	opts template.DebianOptions

	mu       sync.Mutex
	t        *sandbox.Template
	building chan struct{}
	err      error
}

// EnableDebian makes the built-in debian template available: built with
// mmdebstrap on first use (or ahead of time by PrepareDebian), then taken
// from the cache while its inputs stay the same.
func (c *Catalog) EnableDebian(opts template.DebianOptions) {
	if opts.Base.CacheDir == "" {
		opts.Base = c.opts
	}
	c.mu.Lock()
	c.debian = &debianBuild{opts: opts}
	c.mu.Unlock()
}

func (c *Catalog) debianEnabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.debian != nil
}

// Default is the template a create without one gets: debian once it is
// enabled and built (a real userland), base otherwise (and while debian
// builds, so a create never waits for a minute-long build it did not ask for).
func (c *Catalog) Default() string {
	c.mu.Lock()
	d := c.debian
	c.mu.Unlock()
	if d == nil {
		return BaseName
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t == nil {
		return BaseName
	}
	return DebianName
}

// PrepareDebian builds the debian template unless it is built.
func (c *Catalog) PrepareDebian(ctx context.Context) (sandbox.Template, error) {
	c.mu.Lock()
	d := c.debian
	c.mu.Unlock()
	if d == nil {
		return sandbox.Template{}, fmt.Errorf("the debian template is not enabled on this server")
	}
	d.mu.Lock()
	if d.t != nil {
		t := *d.t
		d.mu.Unlock()
		return t, nil
	}
	if d.building == nil {
		d.building = make(chan struct{})
		go c.buildDebian(d)
	}
	done := d.building
	d.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return sandbox.Template{}, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t == nil {
		return sandbox.Template{}, d.err
	}
	return *d.t, nil
}

func (c *Catalog) buildDebian(d *debianBuild) {
	start := time.Now()
	ctx := context.Background()
	a, err := template.BuildDebian(ctx, d.opts)
	var t sandbox.Template
	if err == nil {
		now := time.Now().UTC()
		t = sandbox.Template{
			ID: sandbox.PrefixTemplate + a.Hash[:20], Name: DebianName, Builtin: true, State: sandbox.TemplateReady,
			Kernel: a.Kernel, Initrd: a.Initrd, BaseDisk: a.BaseDisk, KernelArgs: a.KernelArgs, Dir: a.Dir,
			Hash: a.Hash, DiskMiB: a.DiskMiB, Source: "mmdebstrap", CreatedAt: now, UpdatedAt: now,
		}
		if old, gerr := c.store.GetTemplate(ctx, DebianName); gerr == nil && old.Hash == t.Hash {
			t.CreatedAt = old.CreatedAt
		}
		err = c.store.PutTemplate(ctx, t)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.err = fmt.Errorf("build template debian: %w", err)
		c.log.Error("template debian failed", "err", err)
	} else {
		d.t = &t
		c.log.Info("template debian ready", "hash", t.Hash[:12], "took", time.Since(start).Round(time.Millisecond))
	}
	close(d.building)
	d.building = nil
}
