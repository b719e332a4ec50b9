// Package catalog resolves template names to bootable artifacts. The built-in
// "base" template is built from the host's Debian packages on first use (or
// ahead of time by Prepare) and rebuilt when its inputs change; the result is
// recorded in the store so the API can list it.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// Built-in templates' names.
const (
	BaseName    = "base"
	DebianName  = "debian"
	DesktopName = template.DesktopName
)

// builtinNames are names no account template may take.
var builtinNames = []string{BaseName, DebianName, DesktopName}

// Catalog is the node's view of templates.
type Catalog struct {
	store store.Store
	opts  template.BaseOptions
	log   *slog.Logger

	mu   sync.Mutex
	base *sandbox.Template
	// building is closed when the build in progress ends.
	building chan struct{}
	err      error

	derived map[string]*derivedBuild // by name: EnableDebian, EnableDesktop
	b       *builds                  // nil until StartBuilds
	closing bool                     // Close was called: cancelled builds resume later
	sweepMu sync.Mutex
}

// New returns a catalog that builds base with opts.
func New(s store.Store, opts template.BaseOptions) *Catalog {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Catalog{store: s, opts: opts, log: log}
}

// Known reports whether ref (an id or a name) is a template the account
// may use: its own or a built-in (without building anything). Another
// account's template is as unknown as one that never existed.
func (c *Catalog) Known(ctx context.Context, accountID, ref string) error {
	if _, err := c.Resolve(ctx, accountID, ref); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("template %q does not exist: %w", ref, errdefs.ErrUnknownTemplate)
		}
		return err
	}
	return nil
}

// Get returns the artifacts of the template filed under name (base, or an
// account template's id), building base if needed. A deleted template is
// still found while sandboxes boot from it.
func (c *Catalog) Get(ctx context.Context, name string) (sandbox.Template, error) {
	if c.derivedOf(name) != nil {
		return c.PrepareBuiltin(ctx, name)
	}
	if name != BaseName {
		t, err := c.store.GetTemplate(ctx, name)
		if err != nil {
			return t, fmt.Errorf("template %q: %w", name, errdefs.ErrUnknownTemplate)
		}
		return t, nil
	}
	return c.Prepare(ctx)
}

// Prepare builds base unless it is built, sharing one build between callers.
func (c *Catalog) Prepare(ctx context.Context) (sandbox.Template, error) {
	c.mu.Lock()
	if c.base != nil {
		t := *c.base
		c.mu.Unlock()
		return t, nil
	}
	if c.building == nil {
		c.building = make(chan struct{})
		go c.build()
	}
	done := c.building
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return sandbox.Template{}, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base == nil {
		return sandbox.Template{}, c.err
	}
	return *c.base, nil
}

// build runs under no request's context: a client that gives up must not
// abort a build others wait for.
func (c *Catalog) build() {
	start := time.Now()
	a, err := template.BuildBase(context.Background(), c.opts)
	var t sandbox.Template
	if err == nil {
		t = sandbox.Template{
			ID: sandbox.PrefixTemplate + a.Hash[:20], Name: BaseName,
			Kernel: a.Kernel, Initrd: a.Initrd, BaseDisk: a.BaseDisk, KernelArgs: a.KernelArgs,
			Hash: a.Hash, DiskMiB: a.DiskMiB, CreatedAt: time.Now().UTC(),
			Builtin: true, State: sandbox.TemplateReady, Dir: a.Dir,
		}
		if old, gerr := c.store.GetTemplate(context.Background(), BaseName); gerr == nil && old.Hash == t.Hash {
			t.CreatedAt = old.CreatedAt
		}
		err = c.store.PutTemplate(context.Background(), t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = fmt.Errorf("build template base: %w", err)
		c.log.Error("template base failed", "err", err)
	} else {
		c.base = &t
		c.log.Info("template base ready", "hash", t.Hash[:12], "took", time.Since(start).Round(time.Millisecond))
	}
	close(c.building)
	c.building = nil // a failed build is retried by the next caller
}
