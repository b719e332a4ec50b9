package template

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
)

// ociBuilderVersion is part of an OCI build's hash; bump it when this file
// changes what it writes.
const ociBuilderVersion = "zeish-oci-1"

// Transports an image can come from.
const (
	TransportDockerArchive = "docker-archive" // docker save output
	TransportOCI           = "oci"            // an OCI image layout folder
	TransportOCIArchive    = "oci-archive"    // an OCI image layout as a tar
	TransportRegistry      = "registry"       // host/repo:tag or host/repo@digest
)

// ErrBadSource says the source string itself is wrong (unknown transport,
// empty reference): the API answers it with 400 before building.
var ErrBadSource = errors.New("bad template source")

// ErrRegistryAuth says the registry refused the credentials (or wanted some).
var ErrRegistryAuth = errors.New("registry refused access")

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
	Digest     string   `json:"digest"` // the image (manifest) digest
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	LayerBytes int64    `json:"layer_bytes"` // compressed size of all layers
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
	// WorkDir holds an unpacked oci-archive while the build runs; default a
	// temp folder in the cache, removed afterwards.
	WorkDir  string
	Progress func(Progress) // nil: none
	// Transport is the registry client's HTTP transport (tests); nil: default.
	Transport http.RoundTripper
}

// injectDir holds zeish's own files in an OCI template's root: a folder no
// image uses, so the image's own /sbin/init, libc or resize2fs stay as they are.
const injectDir = "/.zeish"

// BuildOCI returns the cached template for the image opts.Source names,
// building it if missing: kernel and initramfs like base, and the image's
// layers unpacked onto an ext4 disk with sandboxd as init. Builds are keyed by
// the image digest, the disk size and every base input.
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
	if opts.WorkDir == "" {
		if err := os.MkdirAll(opts.Base.CacheDir, 0o755); err != nil {
			return nil, err
		}
		w, err := os.MkdirTemp(opts.Base.CacheDir, ".src-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(w)
		opts.WorkDir = w
	}
	img, err := openImage(ctx, opts.Source, opts.WorkDir, opts.Transport)
	if err != nil {
		return nil, fmt.Errorf("template oci: %w", err)
	}
	cfg, err := imageConfig(img)
	if err != nil {
		return nil, fmt.Errorf("template oci: %w", err)
	}
	h := sha256.New()
	writeField(h, ociBuilderVersion)
	writeField(h, in.hash())
	writeField(h, cfg.Digest)
	writeField(h, strconv.Itoa(opts.DiskMiB))
	hash := hex.EncodeToString(h.Sum(nil))
	progress(Progress{Step: "resolve", Message: "image " + cfg.Digest})
	a, built, err := ensureKind(ctx, log, opts.Base.CacheDir, "oci", hash, func(ctx context.Context, dir string) (*manifest, error) {
		log.Info("template: building from image", keyHash, hash[:12], "source", opts.Source.String(), "digest", cfg.Digest)
		return buildOCI(ctx, dir, in, img, cfg, opts.DiskMiB, hash, progress)
	})
	if err != nil {
		return nil, fmt.Errorf("template oci: %w", err)
	}
	if built {
		log.Info("template: image built", keyDir, a.Dir, keyTook, time.Since(start).Round(time.Millisecond))
	}
	progress(Progress{Step: "done", Message: fmt.Sprintf("ready (%s)", map[bool]string{true: "built", false: "cached"}[built])})
	return a, nil
}

// openImage resolves src to one linux/amd64 image.
func openImage(ctx context.Context, src Source, work string, rt http.RoundTripper) (v1.Image, error) {
	switch src.Transport {
	case TransportDockerArchive:
		if err := isFile(src.Ref); err != nil {
			return nil, err
		}
		img, err := tarball.ImageFromPath(src.Ref, nil)
		if err != nil {
			return nil, fmt.Errorf("%s is not a docker archive: %v: %w", src.Ref, err, ErrBadImage)
		}
		return img, nil
	case TransportOCI:
		return layoutImage(src.Ref)
	case TransportOCIArchive:
		if err := isFile(src.Ref); err != nil {
			return nil, err
		}
		dir := filepath.Join(work, "layout")
		if err := untarLayout(ctx, src.Ref, dir); err != nil {
			return nil, err
		}
		return layoutImage(dir)
	case TransportRegistry:
		ref, err := name.ParseReference(src.Ref)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", err, ErrBadSource)
		}
		auth := authn.Anonymous
		switch {
		case src.Token != "":
			auth = authn.FromConfig(authn.AuthConfig{RegistryToken: src.Token})
		case src.Username != "" || src.Password != "":
			auth = &authn.Basic{Username: src.Username, Password: src.Password}
		}
		ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth),
			remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})}
		if rt != nil {
			ropts = append(ropts, remote.WithTransport(rt))
		}
		img, err := remote.Image(ref, ropts...)
		if err != nil {
			var terr *transport.Error
			if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
				return nil, fmt.Errorf("%s: the registry answered %d: %v: %w", src.Ref, terr.StatusCode, err, ErrRegistryAuth)
			}
			return nil, fmt.Errorf("pull %s: %v: %w", src.Ref, err, ErrBadImage)
		}
		return img, nil
	}
	return nil, fmt.Errorf("unknown transport %q: %w", src.Transport, ErrBadSource)
}

func isFile(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%v: %w", err, ErrBadSource)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a file: %w", p, ErrBadSource)
	}
	return nil
}

// layoutImage picks the linux/amd64 image (or the only one) of a layout.
func layoutImage(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %v: %w", dir, err, ErrBadImage)
	}
	return pickImage(idx, 0)
}

func pickImage(idx v1.ImageIndex, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, fmt.Errorf("image indexes nest too deep: %w", ErrBadImage)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index: %v: %w", err, ErrBadImage)
	}
	var fallback *v1.Descriptor
	for i := range m.Manifests {
		d := &m.Manifests[i]
		if p := d.Platform; p != nil && (p.OS != "linux" || p.Architecture != "amd64") {
			continue
		}
		switch d.MediaType {
		case types.OCIImageIndex, types.DockerManifestList:
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("read index %s: %v: %w", d.Digest, err, ErrBadImage)
			}
			return pickImage(child, depth+1)
		case types.OCIManifestSchema1, types.DockerManifestSchema2:
			if d.Platform != nil {
				return idx.Image(d.Digest)
			}
			if fallback == nil {
				fallback = d
			}
		}
	}
	if fallback == nil {
		return nil, fmt.Errorf("no linux/amd64 image in the index: %w", ErrBadImage)
	}
	img, err := idx.Image(fallback.Digest)
	if err != nil {
		return nil, fmt.Errorf("read image %s: %v: %w", fallback.Digest, err, ErrBadImage)
	}
	return img, nil
}

var blobName = regexp.MustCompile(`^blobs/[a-z0-9]+/[a-f0-9]{32,128}$`)

// untarLayout unpacks an OCI archive's layout into dir, streaming each blob
// to its file. Only the names a layout has are accepted: nothing else can
// be written, and no name can leave dir.
func untarLayout(ctx context.Context, archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("%v: %w", err, ErrBadSource)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	seen := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s is not an OCI archive: %v: %w", archive, err, ErrBadImage)
		}
		n := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if h.Typeflag == tar.TypeDir || n == "." {
			continue
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
			return fmt.Errorf("%s: unexpected entry %q in an OCI archive: %w", archive, h.Name, ErrBadImage)
		}
		if n != "index.json" && n != "oci-layout" && !blobName.MatchString(n) {
			continue // e.g. a manifest.json for docker: not ours to read
		}
		dst := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		seen++
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil || seen == 0 {
		return fmt.Errorf("%s is not an OCI archive (no index.json): %w", archive, ErrBadImage)
	}
	return nil
}

func imageConfig(img v1.Image) (*ImageConfig, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image digest: %v: %w", err, ErrBadImage)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image config: %v: %w", err, ErrBadImage)
	}
	if cf.OS != "" && cf.OS != "linux" || cf.Architecture != "" && cf.Architecture != "amd64" {
		return nil, fmt.Errorf("image is %s/%s, guests are linux/amd64: %w", cf.OS, cf.Architecture, ErrBadImage)
	}
	c := &ImageConfig{Digest: d.String(), Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir,
		User: cf.Config.User, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image layers: %v: %w", err, ErrBadImage)
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return nil, fmt.Errorf("layer size: %v: %w", err, ErrBadImage)
		}
		c.LayerBytes += n
	}
	return c, nil
}

// buildOCI writes vmlinuz, initrd.img and base.qcow2 into dir.
func buildOCI(ctx context.Context, dir string, in *inputs, img v1.Image, cfg *ImageConfig, diskMiB int, hash string,
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
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image layers: %v: %w", err, ErrBadImage)
	}
	// The disk must hold the files and what mkfs needs for itself (inode
	// tables, journal): about 8 %.
	u := newUnpacker(stage, int64(diskMiB)<<20*92/100)
	for i, l := range layers {
		if err := applyLayer(ctx, u, l, i+1, len(layers), progress); err != nil {
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

func applyLayer(ctx context.Context, u *unpacker, l v1.Layer, i, n int, progress func(Progress)) error {
	d, _ := l.Digest()
	total, _ := l.Size()
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("layer %d (%s): %v: %w", i, d, err, ErrBadImage)
	}
	defer rc.Close()
	cr := &countingReader{r: rc, ctx: ctx, report: func(b int64) {
		progress(Progress{Step: "layer", Layer: i, Layers: n, Bytes: b, Total: total})
	}}
	progress(Progress{Step: "layer", Layer: i, Layers: n, Total: total, Message: fmt.Sprintf("layer %d/%d %s", i, n, d)})
	plain, err := decompress(cr)
	if err != nil {
		return fmt.Errorf("layer %d (%s): %v: %w", i, d, err, ErrBadImage)
	}
	defer plain.Close()
	if err := u.apply(plain); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("layer %d (%s): %w", i, d, err)
	}
	// Drain: a digest check happens at EOF of the compressed stream.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return fmt.Errorf("layer %d (%s): %v: %w", i, d, err, ErrBadImage)
	}
	progress(Progress{Step: "layer", Layer: i, Layers: n, Bytes: cr.n, Total: total})
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

// decompress opens a layer stream compressed with gzip, zstd or nothing,
// told apart by their magic numbers.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return gzip.NewReader(br)
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		d, err := zstd.NewReader(br)
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}
