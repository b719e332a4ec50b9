package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/zeish/zeish/internal/dialguard"
	"github.com/zeish/zeish/template/ocisource"
)

// ociBuilderVersion is part of an OCI build's hash; bump it when this file
// changes what it writes. 2: keyed by the verified config and layer
// digests and a cache scope instead of the manifest digest (issue 27).
const ociBuilderVersion = "zeish-oci-2"

// Transports an image can come from.
const (
	TransportDockerArchive = ocisource.TransportDockerArchive // docker save output
	TransportOCI           = ocisource.TransportOCI           // an OCI image layout folder
	TransportOCIArchive    = ocisource.TransportOCIArchive    // an OCI image layout as a tar
	TransportRegistry      = ocisource.TransportRegistry      // host/repo:tag or host/repo@digest
)

// ErrBadSource says the source string itself is wrong (unknown transport,
// empty reference): the API answers it with 400 before building.
var ErrBadSource = ocisource.ErrBadSource

// ErrRegistryAuth says the registry refused the credentials (or wanted some).
var ErrRegistryAuth = ocisource.ErrRegistryAuth

// ErrRegistryBlocked says the registry's address is in a blocked range
// (loopback, private, link-local; ZEISH_REGISTRY_ALLOW_RANGES opens one).
var ErrRegistryBlocked = ocisource.ErrRegistryBlocked

// Source says where an image comes from.
type Source struct {
	Transport string
	Ref       string // a path, or a registry reference
	Username  string // registry basic auth, optional
	Password  string
	// Token, when set, is sent to the registry as a bearer token instead
	// of basic auth (see RegistryCredentials).
	Token string
}

// RegistryCredentials reads a stored secret as registry credentials:
// "user:password" is basic auth (split at the first colon, so a password
// may hold colons), anything else is a bearer token.
func RegistryCredentials(secret string) (username, password, token string) {
	if u, p, ok := strings.Cut(secret, ":"); ok {
		return u, p, ""
	}
	return "", "", secret
}

// HasAuth reports whether the source carries registry credentials.
func (s Source) HasAuth() bool { return s.Username != "" || s.Password != "" || s.Token != "" }

// ParseSource reads "transport:ref".
func ParseSource(s string) (Source, error) {
	t, ref, ok := strings.Cut(s, ":")
	if !ok || ref == "" {
		return Source{}, fmt.Errorf("source %q: want TRANSPORT:REF (docker-archive:, oci:, oci-archive:, registry:): %w", s, ErrBadSource)
	}
	switch t {
	case TransportDockerArchive, TransportOCI, TransportOCIArchive:
	case TransportRegistry:
		if _, err := name.ParseReference(ref); err != nil {
			return Source{}, fmt.Errorf("source %q: %v: %w", s, err, ErrBadSource)
		}
	default:
		return Source{}, fmt.Errorf("source %q: unknown transport %q (docker-archive, oci, oci-archive, registry): %w", s, t, ErrBadSource)
	}
	return Source{Transport: t, Ref: ref}, nil
}

func (s Source) String() string { return s.Transport + ":" + s.Ref }

// ImageConfig is what a template keeps from the image config: exec defaults
// and the default start command.
type ImageConfig struct {
	Digest string `json:"digest"` // the manifest's digest; a docker archive's: its config's
	// ConfigDigest is the image config's digest: with the layers' diff_ids
	// (both checked against what was read) it says what the build unpacked.
	ConfigDigest string   `json:"config_digest,omitempty"`
	Env          []string `json:"env,omitempty"`
	WorkingDir   string   `json:"working_dir,omitempty"`
	User         string   `json:"user,omitempty"`
	Entrypoint   []string `json:"entrypoint,omitempty"`
	Cmd          []string `json:"cmd,omitempty"`
	LayerBytes   int64    `json:"layer_bytes"` // compressed size of all layers
}

// StartCmd is Entrypoint followed by Cmd, as a container runtime starts it.
func (c *ImageConfig) StartCmd() []string {
	return append(append([]string{}, c.Entrypoint...), c.Cmd...)
}

// Progress is one step of a build, for progress bars and the build log.
type Progress struct {
	Step    string `json:"step"` // resolve, pull, layer, inject, disk, done
	Layer   int    `json:"layer,omitempty"`
	Layers  int    `json:"layers,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"` // compressed bytes of the layer read so far
	Total   int64  `json:"total,omitempty"` // compressed size of the layer
	Message string `json:"message,omitempty"`
}

// OCIOptions say what to build from and how.
type OCIOptions struct {
	Base    BaseOptions // kernel, busybox, sandboxd and the cache folder
	Source  Source
	DiskMiB int // root filesystem size (the image must fit); default DiskMiB
	// Account is the account building: it scopes the cache (cacheScope).
	Account string
	// RegistryGuard refuses registry addresses in blocked ranges, checked
	// on every connection; a registry source without one is refused.
	RegistryGuard *dialguard.Guard
	// Check, when set, sees the image once its metadata is read and
	// checked, before any layer is: an error ends the build (the catalog
	// checks the account's template bytes here).
	Check    func(*ImageConfig) error
	Progress func(Progress) // nil: none
}

// injectDir holds zeish's own files in an OCI template's root: a folder no
// image uses, so the image's own /sbin/init, libc or resize2fs stay as they are.
const injectDir = "/.zeish"

// BuildOCI returns the cached template for the image opts.Source names,
// building it if missing: kernel and initramfs like base, and the image's
// layers unpacked onto an ext4 disk with sandboxd as init. Every blob is
// checked against its digest (package ocisource); builds are keyed by what
// they unpack (the config's digest and the layers' diff_ids), the disk
// size, every base input, and the cache scope.
func BuildOCI(ctx context.Context, opts OCIOptions) (*Artifacts, error) {
	log := opts.Base.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	if opts.Base.CacheDir == "" {
		return nil, fmt.Errorf("template oci: Base.CacheDir is empty")
	}
	if opts.DiskMiB == 0 {
		opts.DiskMiB = DiskMiB
	}
	start := time.Now()
	in, err := gatherInputs(ctx, opts.Base)
	if err != nil {
		return nil, fmt.Errorf("template oci: %w", err)
	}
	progress(Progress{Step: "resolve", Message: "opening " + opts.Source.String()})
	img, err := openImage(ctx, opts.Source, opts.RegistryGuard)
	if err != nil {
		return nil, fmt.Errorf("template oci: %w", err)
	}
	defer img.Close()
	cfg := imageConfig(img)
	if opts.Check != nil {
		if err := opts.Check(cfg); err != nil {
			return nil, fmt.Errorf("template oci: %w", err)
		}
	}
	hash := ociKey(in, img, opts.DiskMiB, cacheScope(opts.Source, opts.Account))
	progress(Progress{Step: "resolve", Message: "image " + cfg.Digest})
	a, built, err := ensureKind(ctx, log, opts.Base.CacheDir, "oci", hash, func(ctx context.Context, dir string) (*manifest, error) {
		log.Info("template: building from image", keyHash, hash[:12], "source", opts.Source.String(), "digest", cfg.Digest, "config", cfg.ConfigDigest)
		return buildOCI(ctx, dir, in, img, cfg, opts.DiskMiB, hash, progress)
	})
	if err != nil {
		return nil, fmt.Errorf("template oci: %w", err)
	}
	// A shared build may have been made from another manifest of the same
	// content (another compression): this build's own digests are the ones
	// to report.
	a.Image = cfg
	if built {
		log.Info("template: image built", keyDir, a.Dir, keyTook, time.Since(start).Round(time.Millisecond))
	}
	progress(Progress{Step: "done", Message: fmt.Sprintf("ready (%s)", map[bool]string{true: "built", false: "cached"}[built])})
	return a, nil
}

// cacheScope says which builds may share a cached template. What a build
// unpacked is fixed by its key (every blob was checked against the digests
// the key holds), so sharing is safe by content; the scope is a second
// line. A registry pull, checked end to end against the digests its
// registry's manifest names, is shared by every account that pulls an
// image of the same config and layers. A build from a file (an upload, or
// the admin's path on the server) is its account's alone: no account's
// upload ever satisfies another account's build.
func cacheScope(src Source, account string) string {
	if src.Transport == TransportRegistry {
		return "registry"
	}
	return "account:" + account
}

// ociKey is the cache key of a build of img.
func ociKey(in *inputs, img *ocisource.Image, diskMiB int, scope string) string {
	h := sha256.New()
	writeField(h, ociBuilderVersion)
	writeField(h, in.hash())
	writeField(h, scope)
	writeField(h, img.ConfigDigest)
	for _, l := range img.Layers {
		writeField(h, l.DiffID)
	}
	writeField(h, strconv.Itoa(diskMiB))
	return hex.EncodeToString(h.Sum(nil))
}

// openImage resolves src to one linux/amd64 image, its metadata checked.
func openImage(ctx context.Context, src Source, guard *dialguard.Guard) (*ocisource.Image, error) {
	var reg ocisource.Registry
	if src.Transport == TransportRegistry && guard != nil {
		switch {
		case src.Token != "":
			reg.Auth = authn.FromConfig(authn.AuthConfig{RegistryToken: src.Token})
		case src.Username != "" || src.Password != "":
			reg.Auth = &authn.Basic{Username: src.Username, Password: src.Password}
		}
		t := guard.Transport()
		defer t.CloseIdleConnections() // the layers' fetches open their own
		reg.Transport = t
	}
	img, err := ocisource.Open(ctx, src.Transport, src.Ref, reg)
	if errors.Is(err, ErrRegistryBlocked) {
		return nil, fmt.Errorf("%w (ZEISH_REGISTRY_ALLOW_RANGES opens a range)", err)
	}
	return img, err
}

// imageConfig is what a template keeps of img.
func imageConfig(img *ocisource.Image) *ImageConfig {
	c := img.Config.Config
	return &ImageConfig{Digest: img.Digest, ConfigDigest: img.ConfigDigest, Env: c.Env, WorkingDir: c.WorkingDir,
		User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, LayerBytes: img.LayerBytes}
}

// buildOCI writes vmlinuz, initrd.img and base.qcow2 into dir.
func buildOCI(ctx context.Context, dir string, in *inputs, img *ocisource.Image, cfg *ImageConfig, diskMiB int, hash string,
	progress func(Progress)) (*manifest, error) {
	m := &manifest{Kernel: "vmlinuz", Initrd: "initrd.img", BaseDisk: "base.qcow2",
		KernelArgs: KernelArgs, KernelRelease: in.Release, DiskMiB: diskMiB, Image: cfg}
	if err := os.WriteFile(filepath.Join(dir, m.Kernel), in.Kernel, 0o644); err != nil {
		return nil, err
	}
	if err := writeInitramfsFor(filepath.Join(dir, m.Initrd), in, injectDir+"/sandboxd"); err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	stage := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(stage, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	// The disk must hold the files and what mkfs needs for itself (inode
	// tables, journal): about 8 %.
	u := newUnpacker(stage, int64(diskMiB)<<20*92/100)
	defer u.close()
	for i, l := range img.Layers {
		if err := applyLayer(ctx, u, l, i+1, len(img.Layers), progress); err != nil {
			return nil, err
		}
	}
	u.finish()
	if u.skipped > 0 {
		progress(Progress{Step: "layer", Message: fmt.Sprintf("skipped %d device nodes (the guest's /dev is devtmpfs)", u.skipped)})
	}
	progress(Progress{Step: "inject", Message: "installing sandboxd in " + injectDir})
	if err := injectAgent(stage, in); err != nil {
		return nil, fmt.Errorf("inject agent: %w", err)
	}
	progress(Progress{Step: "disk", Message: fmt.Sprintf("making a %d MiB ext4 disk", diskMiB)})
	if err := makeDiskSized(ctx, stage, filepath.Join(dir, m.BaseDisk), hash, diskMiB); err != nil {
		return nil, fmt.Errorf("root disk: %w", err)
	}
	return m, nil
}

// applyLayer unpacks layer l, checked against its digests as it streams:
// a mismatch fails the build before anything is published (the staging
// tree is removed with the build's temp folder).
func applyLayer(ctx context.Context, u *unpacker, l ocisource.Layer, i, n int, progress func(Progress)) error {
	d := l.Digest
	if d == "" {
		d = l.DiffID
	}
	rc, err := l.Blob(ctx)
	if err != nil {
		return fmt.Errorf("layer %d (%s): %w", i, d, err)
	}
	defer rc.Close()
	cr := &countingReader{r: rc, ctx: ctx, report: func(b int64) {
		progress(Progress{Step: "layer", Layer: i, Layers: n, Bytes: b, Total: l.Size})
	}}
	progress(Progress{Step: "layer", Layer: i, Layers: n, Total: l.Size, Message: fmt.Sprintf("layer %d/%d %s", i, n, d)})
	plain, err := ocisource.Verified(cr, l)
	if err != nil {
		return fmt.Errorf("layer %d: %w", i, err)
	}
	defer plain.Close()
	if err := u.apply(plain); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("layer %d (%s): %w", i, d, err)
	}
	if err := plain.Finish(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("layer %d: %w", i, err)
	}
	progress(Progress{Step: "layer", Layer: i, Layers: n, Bytes: cr.n, Total: l.Size})
	return nil
}

// countingReader reports progress at most every 4 MiB and stops on cancel.
type countingReader struct {
	r      io.Reader
	ctx    context.Context
	n      int64
	last   int64
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n-c.last >= 4<<20 {
		c.last = c.n
		c.report(c.n)
	}
	return n, err
}

// RegistryAuthError reports whether err is a registry refusing access.
func RegistryAuthError(err error) bool { return errors.Is(err, ErrRegistryAuth) }
