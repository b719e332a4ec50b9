package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// derivedBuild shares one build of a Debian-derived built-in template
// (debian, desktop) between callers.
type derivedBuild struct {
	name     string
	opts     template.DebianOptions
	features []string

	mu       sync.Mutex
	t        *sandbox.Template
	building chan struct{}
	err      error
}

// EnableDebian makes the built-in debian template available: built with
// mmdebstrap on first use (or ahead of time by PrepareDebian), then taken
// from the cache while its inputs stay the same.
func (c *Catalog) EnableDebian(opts template.DebianOptions) {
	opts.Name = DebianName
	c.enableDerived(DebianName, opts, nil)
}

// EnableDesktop makes the built-in desktop template available: debian plus
// Chromium, Xvfb and a window manager, so sandboxes of it may ask for a
// browser and a desktop. Built like debian, on first use or by
// PrepareBuiltin.
func (c *Catalog) EnableDesktop(opts template.DebianOptions) {
	opts.Name = DesktopName
	c.enableDerived(DesktopName, opts, []string{sandbox.FeatureBrowser, sandbox.FeatureDesktop})
}

func (c *Catalog) enableDerived(name string, opts template.DebianOptions, features []string) {
	if opts.Base.CacheDir == "" {
		opts.Base = c.opts
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.derived == nil {
		c.derived = map[string]*derivedBuild{}
	}
	c.derived[name] = &derivedBuild{name: name, opts: opts, features: features}
}

// derivedOf is the enabled build of name, or nil.
func (c *Catalog) derivedOf(name string) *derivedBuild {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.derived[name]
}

// enabledDerived lists the enabled derived built-ins by name.
func (c *Catalog) enabledDerived() []*derivedBuild {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*derivedBuild, 0, len(c.derived))
	for _, d := range c.derived {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *derivedBuild) int { return strings.Compare(a.name, b.name) })
	return out
}

// Default is the template a create without one gets: debian once it is
// enabled and built (a real userland), base otherwise (and while debian
// builds, so a create never waits for a minute-long build it did not ask for).
func (c *Catalog) Default() string {
	d := c.derivedOf(DebianName)
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
	return c.PrepareBuiltin(ctx, DebianName)
}

// PrepareBuiltin builds the enabled derived built-in name (debian,
// desktop) unless it is built, sharing one build between callers.
func (c *Catalog) PrepareBuiltin(ctx context.Context, name string) (sandbox.Template, error) {
	d := c.derivedOf(name)
	if d == nil {
		return sandbox.Template{}, fmt.Errorf("the %s template is not enabled on this server", name)
	}
	d.mu.Lock()
	if d.t != nil {
		t := *d.t
		d.mu.Unlock()
		return t, nil
	}
	if d.building == nil {
		d.building = make(chan struct{})
		go c.buildDerived(d)
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

// buildDerived runs under no request's context: a client that gives up
// must not abort a build others wait for.
func (c *Catalog) buildDerived(d *derivedBuild) {
	start := time.Now()
	ctx := context.Background()
	a, err := template.BuildDebian(ctx, d.opts)
	var t sandbox.Template
	if err == nil {
		now := time.Now().UTC()
		t = sandbox.Template{
			ID: sandbox.PrefixTemplate + a.Hash[:20], Name: d.name, Builtin: true, State: sandbox.TemplateReady,
			Kernel: a.Kernel, Initrd: a.Initrd, BaseDisk: a.BaseDisk, KernelArgs: a.KernelArgs, Dir: a.Dir,
			Hash: a.Hash, DiskMiB: a.DiskMiB, Source: "mmdebstrap", Features: d.features, CreatedAt: now, UpdatedAt: now,
		}
		if old, gerr := c.store.GetTemplate(ctx, d.name); gerr == nil && old.Hash == t.Hash {
			t.CreatedAt = old.CreatedAt
		}
		err = c.store.PutTemplate(ctx, t)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.err = fmt.Errorf("build template %s: %w", d.name, err)
		c.log.Error("template "+d.name+" failed", "err", err)
	} else {
		d.t = &t
		c.log.Info("template "+d.name+" ready", "hash", t.Hash[:12], "took", time.Since(start).Round(time.Millisecond))
	}
	close(d.building)
	d.building = nil
}
