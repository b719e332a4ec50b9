package catalog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/dialguard"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// Builds folder layout (<data dir>/template-builds):
//
//	<template id>/build.log   one JSON Event per line, kept after the build
//	<template id>/image.tar   an uploaded archive (read in place), removed once built
//	<template id>/spec.json   what a restart needs to build it again
//
// The built files themselves live in the template cache (oci-<hash>/),
// shared by the templates whose builds unpacked the same checked content
// onto the same disk size within one cache scope (template.cacheScope:
// registry pulls are shared by every account, uploads stay their account's).

// Event is one line of a template's build log and of its event stream.
type Event struct {
	Time     time.Time          `json:"time"`
	Type     string             `json:"type"` // progress, log, state
	Progress *template.Progress `json:"progress,omitempty"`
	Message  string             `json:"message,omitempty"`
	Template *sandbox.Template  `json:"template,omitempty"`
}

// BuildRequest asks for a template built from an image.
type BuildRequest struct {
	AccountID string
	Name      string
	// Source names the image; for an upload, Transport only (docker-archive
	// or oci-archive) and Upload streams the archive.
	Source   template.Source
	Upload   io.Reader
	DiskMiB  int
	StartCmd []string
	ReadyCmd []string
	// ReadyTimeoutSeconds bounds the warm build's wait for ReadyCmd (0: default).
	ReadyTimeoutSeconds int
	Cold                bool
	// VCPUs and MemoryMiB size the warm machine (0: the default size).
	VCPUs, MemoryMiB int
	// RegistrySecret names the account secret Source's credentials came
	// from (resolved by the caller): a restart reads it again, while
	// credentials given inline are never kept.
	RegistrySecret string
}

// BuildOptions configure template builds.
type BuildOptions struct {
	Dir      string // <data dir>/template-builds
	Parallel int    // builds running at once; default 2
	// Host, on a cluster's node agent, is its node id: templates it builds
	// are recorded as held there, and it resumes and sweeps only its own
	// (the database is shared with the other nodes).
	Host string
	// Warmer saves a built template's booted machine, so that its sandboxes
	// start from it (warm templates); nil: every template boots cold.
	Warmer Warmer
	// Ready hears of every build that ended ready (a node uploads the
	// template's files to the image store the cluster shares); nil: none.
	Ready func(sandbox.Template)
	// Removed is asked, before a deleted template's files go, to drop
	// what else holds them (the node deletes them from the image store);
	// an error keeps the template for the next sweep. nil: nothing.
	Removed func(context.Context, sandbox.Template) error
	// RegistryGuard refuses registry addresses in blocked ranges, on every
	// connection a pull makes; nil: registry builds fail (registry_blocked).
	RegistryGuard *dialguard.Guard
	// Timeout bounds a build's image part (open, pull, unpack, disk): past
	// it the build fails with error_code build_timeout and frees its slot.
	// Default DefaultBuildTimeout. (The warm step has its own bounds: the
	// boot timeout and ready_timeout_seconds.)
	Timeout time.Duration
	// Quota bounds each account's templates (zero fields: no bound).
	Quota Quota
}

// DefaultBuildTimeout is a build's deadline unless BuildOptions says.
const DefaultBuildTimeout = 30 * time.Minute

// Warmer boots a built template, runs its start command, waits for its
// ready command and saves the machine (node.Warm). unpin is called once the
// template's record names the saved machine. CollectImages lets it drop
// saved machines no template or sandbox needs any more (a template was
// deleted).
type Warmer interface {
	Warm(ctx context.Context, tpl sandbox.Template, progress func(string)) (w *sandbox.TemplateWarm, unpin func(), err error)
	CollectImages(ctx context.Context)
}

type builds struct {
	dir     string
	host    string
	sem     chan struct{}
	warmer  Warmer
	guard   *dialguard.Guard
	timeout time.Duration
	quota   *quotas
	ready   func(sandbox.Template)
	removed func(context.Context, sandbox.Template) error

	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	changed map[string]chan struct{}
	running sync.WaitGroup
}

// uploadName is where an uploaded archive waits for its build.
const uploadName = "image.tar"

// StartBuilds enables template builds and resumes those a previous zeishd
// left in state building: a build with its inputs still there (an upload
// kept in its folder, a registry reference without credentials, a path)
// starts again from scratch; one whose credentials were not kept fails with
// that reason.
func (c *Catalog) StartBuilds(ctx context.Context, opts BuildOptions) error {
	if opts.Parallel <= 0 {
		opts.Parallel = 2
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultBuildTimeout
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return err
	}
	c.b = &builds{dir: opts.Dir, host: opts.Host, sem: make(chan struct{}, opts.Parallel), warmer: opts.Warmer, ready: opts.Ready, removed: opts.Removed,
		guard: opts.RegistryGuard, timeout: opts.Timeout, quota: newQuotas(opts.Quota),
		cancels: map[string]context.CancelFunc{}, changed: map[string]chan struct{}{}}
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.State != sandbox.TemplateBuilding || !c.holds(t) {
			continue
		}
		req, ok := c.resumable(ctx, t)
		if !ok {
			c.finish(t, nil, nil, errInterrupted)
			continue
		}
		c.log.Info("template build resumed after restart", "template", t.ID, "name", t.Name)
		c.appendEvent(t.ID, Event{Type: "log", Message: "zeishd restarted: building again"})
		c.spawn(t, req)
	}
	go c.sweepLoop(ctx)
	return nil
}

// errInterrupted ends a build a restart cannot resume.
var errInterrupted = errors.New("interrupted by a zeishd restart; registry credentials are not kept (or its registry_secret is gone), build it again")

// holds reports whether t's files are this process's to build and remove:
// always on a single zeishd, only its own on a cluster's node agent.
func (c *Catalog) holds(t sandbox.Template) bool {
	return c.b == nil || c.b.host == "" || t.Host == c.b.host
}

// sweepLoop removes deleted templates' files once their last sandbox is
// gone (a sandbox delete does not call into the catalog).
func (c *Catalog) sweepLoop(ctx context.Context) {
	c.Sweep(ctx)
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Sweep(ctx)
		}
	}
}

// Close cancels running builds and waits for them (they are resumed by
// the next StartBuilds).
func (c *Catalog) Close() {
	if c.b == nil {
		return
	}
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.b.mu.Lock()
	for _, cancel := range c.b.cancels {
		cancel()
	}
	c.b.mu.Unlock()
	c.b.running.Wait()
}

// buildSpec is what a build needs beyond the template row, kept beside
// the log so a restart can resume it.
type buildSpec struct {
	Transport string `json:"transport"`
	Ref       string `json:"ref"`
	HasAuth   bool   `json:"has_auth"`
	// RegistrySecret is the name (never the value) of the account secret
	// holding the registry's credentials.
	RegistrySecret string `json:"registry_secret,omitempty"`
}

func (c *Catalog) resumable(ctx context.Context, t sandbox.Template) (BuildRequest, bool) {
	b, err := os.ReadFile(filepath.Join(c.b.dir, t.ID, "spec.json"))
	if err != nil {
		return BuildRequest{}, false
	}
	var s buildSpec
	if json.Unmarshal(b, &s) != nil || s.HasAuth {
		return BuildRequest{}, false
	}
	src := template.Source{Transport: s.Transport, Ref: s.Ref}
	if s.RegistrySecret != "" {
		sec, err := c.store.GetAccountSecret(ctx, t.AccountID, s.RegistrySecret)
		if err != nil {
			return BuildRequest{}, false
		}
		src.Username, src.Password, src.Token = template.RegistryCredentials(sec.Value)
	}
	return BuildRequest{AccountID: t.AccountID, Name: t.Name, Source: src, RegistrySecret: s.RegistrySecret,
		DiskMiB: t.DiskMiB, StartCmd: t.StartCmd, ReadyCmd: t.ReadyCmd, ReadyTimeoutSeconds: t.ReadyTimeoutSeconds, Cold: t.Cold,
		VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB}, true
}

// Build records a template in state building and builds it in the
// background. An upload is streamed to the build's folder first (the
// caller's request carries it), so Build returns once it is stored.
func (c *Catalog) Build(ctx context.Context, req BuildRequest) (sandbox.Template, error) {
	if c.b == nil {
		return sandbox.Template{}, fmt.Errorf("template builds are not enabled on this server: %w", errdefs.ErrUnavailable)
	}
	if err := c.nameFree(ctx, req.AccountID, req.Name); err != nil {
		return sandbox.Template{}, err
	}
	used, release, err := c.admit(ctx, req.AccountID, req.Upload != nil)
	if err != nil {
		return sandbox.Template{}, err
	}
	defer release()
	now := time.Now().UTC()
	t := sandbox.Template{ID: sandbox.NewID(sandbox.PrefixTemplate), Name: req.Name, AccountID: req.AccountID,
		State: sandbox.TemplateBuilding, Source: req.Source.String(), DiskMiB: req.DiskMiB,
		StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, ReadyTimeoutSeconds: req.ReadyTimeoutSeconds, Cold: req.Cold,
		VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, CreatedAt: now, UpdatedAt: now, Host: c.b.host}
	dir := filepath.Join(c.b.dir, t.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return t, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if req.Upload != nil {
		p := filepath.Join(dir, uploadName)
		counted := c.countUpload(req.AccountID, used, req.Upload)
		err := copyToFile(p, counted)
		counted.done() // from here the kept file counts, or nothing does
		if err != nil {
			return t, fmt.Errorf("upload: %w", err)
		}
		req.Source.Ref = p
		t.Source = req.Source.Transport + ":upload"
	}
	spec, _ := json.Marshal(buildSpec{Transport: req.Source.Transport, Ref: req.Source.Ref,
		HasAuth: req.Source.HasAuth() && req.RegistrySecret == "", RegistrySecret: req.RegistrySecret})
	if err := os.WriteFile(filepath.Join(dir, "spec.json"), spec, 0o600); err != nil {
		return t, err
	}
	if err := c.store.PutTemplate(ctx, t); err != nil {
		return t, err
	}
	ok = true
	c.appendEvent(t.ID, Event{Type: "state", Template: &t})
	c.spawn(t, req)
	return t, nil
}

func copyToFile(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// nameFree refuses a name the account already uses, or a built-in's.
func (c *Catalog) nameFree(ctx context.Context, accountID, name string) error {
	if slices.Contains(builtinNames, name) {
		return fmt.Errorf("template name %q is a built-in's: %w", name, errdefs.ErrNameTaken)
	}
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.AccountID == accountID && t.Name == name && t.State != sandbox.TemplateDeleted {
			return fmt.Errorf("template name %q is taken (%s): %w", name, t.ID, errdefs.ErrNameTaken)
		}
	}
	return nil
}

// spawn runs the build when a slot is free.
func (c *Catalog) spawn(t sandbox.Template, req BuildRequest) {
	ctx, cancel := context.WithCancel(context.Background())
	c.b.mu.Lock()
	c.b.cancels[t.ID] = cancel
	c.b.mu.Unlock()
	c.b.running.Add(1)
	go func() {
		defer c.b.running.Done()
		defer func() {
			c.b.mu.Lock()
			delete(c.b.cancels, t.ID)
			c.b.mu.Unlock()
			cancel()
		}()
		select {
		case c.b.sem <- struct{}{}:
		case <-ctx.Done():
			c.finish(t, nil, nil, ctx.Err())
			return
		}
		defer func() { <-c.b.sem }()
		c.appendEvent(t.ID, Event{Type: "log", Message: "build started"})
		bctx, bcancel := context.WithTimeout(ctx, c.b.timeout)
		a, err := c.runBuild(bctx, t, req)
		if err != nil && ctx.Err() == nil && errors.Is(bctx.Err(), context.DeadlineExceeded) {
			err = &timeoutError{limit: c.b.timeout, err: err}
		}
		bcancel()
		defer c.pulled(t.ID) // once finish has recorded its layer_bytes
		var warm *sandbox.TemplateWarm
		if err == nil && !req.Cold && c.b.warmer != nil {
			var unpin func()
			if warm, unpin, err = c.warm(ctx, t, a); err == nil {
				defer unpin() // once finish has recorded it
			}
		}
		c.finish(t, a, warm, err)
	}()
}

func (c *Catalog) runBuild(ctx context.Context, t sandbox.Template, req BuildRequest) (*template.Artifacts, error) {
	os.RemoveAll(filepath.Join(c.b.dir, t.ID, "work")) // an oci-archive unpacked by a zeishd before issue 27
	return template.BuildOCI(ctx, template.OCIOptions{Base: c.opts, Source: req.Source, DiskMiB: req.DiskMiB,
		Account: t.AccountID, RegistryGuard: c.b.guard, Check: c.checkImage(ctx, t, req.Source),
		Progress: func(p template.Progress) {
			c.appendEvent(t.ID, Event{Type: "progress", Progress: &p, Message: p.Message})
		}})
}

// timeoutError is a build stopped at its deadline.
type timeoutError struct {
	limit time.Duration
	err   error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("the build did not finish within %s (ZEISH_TEMPLATE_BUILD_TIMEOUT): %v", e.limit, e.err)
}

func (e *timeoutError) Unwrap() error { return e.err }

// errorCode is the error_code of a failed build.
func errorCode(err error) string {
	var te *timeoutError
	switch {
	case errors.As(err, &te):
		return sandbox.TemplateBuildTimeout
	case errors.Is(err, errInterrupted):
		return sandbox.TemplateInterrupted
	case errors.Is(err, template.ErrRegistryBlocked):
		return sandbox.TemplateRegistryBlocked
	case errors.Is(err, template.ErrRegistryAuth):
		return sandbox.TemplateRegistryAuth
	case errors.Is(err, errdefs.ErrTemplateQuota):
		return sandbox.TemplateQuota
	case errors.Is(err, template.ErrBadImage), errors.Is(err, template.ErrBadSource):
		return sandbox.TemplateBadImage
	}
	return sandbox.TemplateBuildFailed
}

// warm saves the built template's machine (warm templates); its steps go to
// the build log.
func (c *Catalog) warm(ctx context.Context, t sandbox.Template, a *template.Artifacts) (*sandbox.TemplateWarm, func(), error) {
	applyArtifacts(&t, a)
	w, unpin, err := c.b.warmer.Warm(ctx, t, func(msg string) {
		c.appendEvent(t.ID, Event{Type: "log", Message: "warm: " + msg})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("warm start: %w", err)
	}
	c.appendEvent(t.ID, Event{Type: "log", Message: fmt.Sprintf("warm: saved in %.1f s; sandboxes of %d vCPU, %d MiB start from it",
		float64(w.BuildMS)/1000, w.VCPUs, w.MemoryMiB)})
	return w, unpin, nil
}

// applyArtifacts fills in what a build produced.
func applyArtifacts(t *sandbox.Template, a *template.Artifacts) {
	t.Kernel, t.Initrd, t.BaseDisk, t.KernelArgs, t.Dir = a.Kernel, a.Initrd, a.BaseDisk, a.KernelArgs, a.Dir
	t.Hash, t.DiskMiB = a.Hash, a.DiskMiB
	if img := a.Image; img != nil {
		t.Digest, t.ConfigDigest, t.LayerBytes = img.Digest, img.ConfigDigest, img.LayerBytes
		t.Env, t.WorkingDir, t.User = img.Env, img.WorkingDir, img.User
		if len(t.StartCmd) == 0 {
			t.StartCmd = img.StartCmd()
		}
	}
}

// finish records a build's end. A build cancelled by Close stays building
// (the next zeishd resumes it); one cancelled by a delete stays deleted.
func (c *Catalog) finish(t sandbox.Template, a *template.Artifacts, warm *sandbox.TemplateWarm, err error) {
	ctx := context.Background()
	cur, gerr := c.store.GetTemplate(ctx, t.Key())
	if gerr != nil || cur.State == sandbox.TemplateDeleted {
		c.appendEvent(t.ID, Event{Type: "log", Message: "build ended after the template was deleted"})
		c.Sweep(ctx)
		return
	}
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if err != nil && closing && errors.Is(err, context.Canceled) {
		c.appendEvent(t.ID, Event{Type: "log", Message: "build interrupted by a zeishd shutdown; it resumes on the next start"})
		return
	}
	cur.UpdatedAt = time.Now().UTC()
	if err != nil {
		cur.State, cur.StateReason, cur.ErrorCode = sandbox.TemplateError, "build failed: "+err.Error(), errorCode(err)
		c.log.Warn("template build failed", "template", t.ID, "code", cur.ErrorCode, "err", err)
	} else {
		cur.State, cur.StateReason, cur.ErrorCode = sandbox.TemplateReady, "", ""
		applyArtifacts(&cur, a)
		cur.Warm = warm
	}
	if perr := c.store.PutTemplate(ctx, cur); perr != nil {
		c.log.Error("record template build", "template", t.ID, "err", perr)
	}
	os.Remove(filepath.Join(c.b.dir, t.ID, uploadName))
	c.appendEvent(t.ID, Event{Type: "state", Template: &cur})
	c.log.Info("template build ended", "template", t.ID, "name", t.Name, "state", cur.State)
	if err == nil && c.b.ready != nil {
		c.b.ready(cur)
	}
}

// appendEvent adds e to the template's build log and wakes its watchers.
func (c *Catalog) appendEvent(id string, e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	b, _ := json.Marshal(e)
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if f, err := os.OpenFile(filepath.Join(c.b.dir, id, "build.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		f.Write(append(b, '\n'))
		f.Close()
	}
	if ch := c.b.changed[id]; ch != nil {
		close(ch)
		delete(c.b.changed, id)
	}
}

// Events returns the build log's events from line `from` on, and a channel
// closed when more arrive.
func (c *Catalog) Events(id string, from int) ([]Event, <-chan struct{}) {
	c.b.mu.Lock()
	ch := c.b.changed[id]
	if ch == nil {
		ch = make(chan struct{})
		c.b.changed[id] = ch
	}
	c.b.mu.Unlock()
	var out []Event
	f, err := os.Open(filepath.Join(c.b.dir, id, "build.log"))
	if err != nil {
		return nil, ch
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for i := 0; sc.Scan(); i++ {
		if i < from {
			continue
		}
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out, ch
}

// Follow calls fn with template id's build log from event from on, as
// the events come, until the build ends (a state event with a settled
// template), fn fails or ctx ends.
func (c *Catalog) Follow(ctx context.Context, id string, from int, fn func(Event) error) error {
	for seen := from; ; {
		events, more := c.Events(id, seen)
		seen += len(events)
		for _, e := range events {
			if err := fn(e); err != nil {
				return err
			}
			if e.Template != nil && e.Template.State != sandbox.TemplateBuilding {
				return nil
			}
		}
		select {
		case <-more:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Resolve finds the template an account means by ref (an id or a name):
// its own first, then the built-ins. Other accounts' templates and deleted
// ones do not exist for it.
func (c *Catalog) Resolve(ctx context.Context, accountID, ref string) (sandbox.Template, error) {
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return sandbox.Template{}, err
	}
	var builtin *sandbox.Template
	for i := range all {
		t := all[i]
		if t.State == sandbox.TemplateDeleted || (t.ID != ref && t.Name != ref) {
			continue
		}
		if t.AccountID == accountID && accountID != "" {
			return t, nil
		}
		if t.AccountID == "" {
			builtin = &all[i]
		}
	}
	if builtin != nil {
		b := *builtin
		b.Builtin = true
		if b.State == "" {
			b.State = sandbox.TemplateReady
		}
		return b, nil
	}
	if ref == BaseName {
		// Not built yet: it is on its way.
		return sandbox.Template{Name: ref, Builtin: true, State: sandbox.TemplateBuilding}, nil
	}
	if d := c.derivedOf(ref); d != nil {
		return sandbox.Template{Name: ref, Builtin: true, State: sandbox.TemplateBuilding, Features: d.features}, nil
	}
	return sandbox.Template{}, fmt.Errorf("template %q does not exist: %w", ref, errdefs.ErrNotFound)
}

// List returns the account's templates and the built-ins.
func (c *Catalog) List(ctx context.Context, accountID string) ([]sandbox.Template, error) {
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	out := []sandbox.Template{}
	for _, t := range all {
		switch {
		case t.State == sandbox.TemplateDeleted:
		case t.AccountID == "":
			t.Builtin = true
			if t.State == "" {
				t.State = sandbox.TemplateReady
			}
			out = append(out, t)
		case t.AccountID == accountID:
			out = append(out, t)
		}
	}
	if !slices.ContainsFunc(out, func(t sandbox.Template) bool { return t.Builtin && t.Name == BaseName }) {
		// Recorded once its first build ends; until then it is on its way.
		out = append(out, sandbox.Template{Name: BaseName, Builtin: true, State: sandbox.TemplateBuilding})
	}
	for _, d := range c.enabledDerived() {
		if !slices.ContainsFunc(out, func(t sandbox.Template) bool { return t.Builtin && t.Name == d.name }) {
			out = append(out, sandbox.Template{Name: d.name, Builtin: true, State: sandbox.TemplateBuilding, Features: d.features})
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Template) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Delete hides an account's template at once and cancels its build; its
// files go when no sandbox boots from them any more (Sweep).
func (c *Catalog) Delete(ctx context.Context, accountID, ref string) (sandbox.Template, error) {
	t, err := c.Resolve(ctx, accountID, ref)
	if err != nil {
		return t, err
	}
	if t.Builtin {
		return t, fmt.Errorf("template %q is built in: %w", t.Name, errdefs.ErrForbidden)
	}
	t.State, t.StateReason, t.UpdatedAt = sandbox.TemplateDeleted, "deleted", time.Now().UTC()
	if err := c.store.PutTemplate(ctx, t); err != nil {
		return t, err
	}
	if c.b != nil {
		c.b.mu.Lock()
		cancel := c.b.cancels[t.ID]
		c.b.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		c.appendEvent(t.ID, Event{Type: "state", Template: &t})
	}
	c.Sweep(ctx)
	if t.Warm != nil && c.b != nil && c.b.warmer != nil {
		c.b.warmer.CollectImages(ctx)
	}
	return t, nil
}

// Sweep removes the files of deleted templates that no live sandbox uses
// and no other template shares, then their rows and build folders.
func (c *Catalog) Sweep(ctx context.Context) {
	c.sweepMu.Lock()
	defer c.sweepMu.Unlock()
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return
	}
	live, err := c.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return
	}
	inUse := map[string]bool{}
	for _, r := range live {
		inUse[r.Template] = true
	}
	dirInUse := map[string]bool{}
	for _, t := range all {
		if t.Dir != "" && (t.State != sandbox.TemplateDeleted || inUse[t.Key()]) {
			dirInUse[t.Dir] = true
		}
	}
	for _, t := range all {
		if t.State != sandbox.TemplateDeleted || inUse[t.Key()] || !c.holds(t) {
			continue
		}
		running := false
		if c.b != nil {
			c.b.mu.Lock()
			running = c.b.cancels[t.ID] != nil
			c.b.mu.Unlock()
		}
		if running {
			continue // its end calls Sweep again
		}
		if c.b != nil && c.b.removed != nil {
			if err := c.b.removed(ctx, t); err != nil {
				c.log.Warn("template kept until its copies go", "template", t.ID, "err", err)
				continue
			}
		}
		if t.Dir != "" && !dirInUse[t.Dir] && strings.HasPrefix(filepath.Base(t.Dir), "oci-") {
			if err := os.RemoveAll(t.Dir); err != nil {
				c.log.Warn("remove template files", "template", t.ID, "dir", t.Dir, "err", err)
				continue
			}
		}
		if c.b != nil {
			os.RemoveAll(filepath.Join(c.b.dir, t.ID))
		}
		if err := c.store.DeleteTemplate(ctx, t.Key()); err != nil {
			c.log.Warn("drop template row", "template", t.ID, "err", err)
			continue
		}
		c.log.Info("template files removed", "template", t.ID, "name", t.Name)
	}
}
