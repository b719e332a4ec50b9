// Package ocisource opens container images from where a template build
// finds them: a registry, an OCI image layout (a folder, or a tar of one)
// or a docker archive (`docker save`). It hands back the image's config and
// its layers with every blob checked against the digest that names it, and
// every piece of metadata size-capped before it is read:
//
//   - an index or manifest against the digest its parent descriptor (or a
//     by-digest reference) gives; the image's manifest digest is the
//     sha256 of the bytes read, never a claim;
//   - the config against the manifest's config digest, before it is parsed;
//   - each layer as it streams: the stored blob against the manifest's
//     digest and size, and its uncompressed tar against the config's
//     rootfs.diff_ids (a docker archive names its layers by file, so there
//     only the diff_ids bind them).
//
// So the config digest, once its layers' diff_ids checked out, says exactly
// what a build unpacked: it is what the template cache is keyed by.
// Nothing of the go-containerregistry readers that trust a blob's file name
// (layout, tarball) is used; for registries its client does the HTTP.
package ocisource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
)

// Errors, which the template package passes on (its sentinels are these).
var (
	// ErrBadImage: the image itself is unusable: not an image, a blob
	// that does not match its digest, metadata past its cap.
	ErrBadImage = errors.New("bad image")
	// ErrBadSource: the source names nothing usable (a missing file).
	ErrBadSource = errors.New("bad template source")
	// ErrRegistryAuth: the registry refused the credentials (or wanted some).
	ErrRegistryAuth = errors.New("registry refused access")
	// ErrRegistryBlocked: the registry's address is in a blocked range.
	ErrRegistryBlocked = errors.New("registry address blocked")
)

// Caps on what is read whole. Registries cap manifests at 4 MiB (Docker
// Hub, containerd); a config of a real image is a few KiB.
const (
	MaxManifestBytes = 4 << 20 // index.json, an index, a manifest, a docker archive's manifest.json
	MaxConfigBytes   = 4 << 20
	MaxIndexEntries  = 1024 // manifests in one index
	MaxLayers        = 1000
	maxIndexDepth    = 4
)

// Config is what a build keeps of an image config.
type Config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Env        []string `json:"Env"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// Image is one linux/amd64 image, resolved and with its metadata checked.
type Image struct {
	// Digest is the manifest's digest (the sha256 of the bytes read); a
	// docker archive has no manifest: its config's digest, Docker's image ID.
	Digest       string
	ConfigDigest string
	Config       Config
	Layers       []Layer
	LayerBytes   int64 // the layers' stored size, summed
	close        func() error
}

// Close releases what the image holds open (an archive's file).
func (img *Image) Close() error {
	if img.close == nil {
		return nil
	}
	return img.close()
}

// Layer is one layer of an image.
type Layer struct {
	// Digest of the blob as stored; "" in a docker archive, which names
	// its layers by file name, not digest.
	Digest string
	Size   int64  // the stored blob's size
	DiffID string // sha256 of the uncompressed tar, from the config
	open   func(ctx context.Context) (io.ReadCloser, error)
}

// Blob opens the layer's blob as stored (compressed or not), unchecked:
// read it through Verified.
func (l Layer) Blob(ctx context.Context) (io.ReadCloser, error) { return l.open(ctx) }

// store is where the blobs of an image come from.
type store interface {
	// manifest returns the raw index or manifest named by digest d, at
	// most MaxManifestBytes, unchecked.
	manifest(ctx context.Context, d string) ([]byte, error)
	// small returns the raw blob named by d, at most limit bytes, unchecked.
	small(ctx context.Context, d string, size, limit int64) ([]byte, error)
	// blob streams the blob named by d.
	blob(ctx context.Context, d string) (io.ReadCloser, error)
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// checkDigest refuses a digest that is not sha256:<64 hex digits>: nothing
// else is ever looked up or used to name a file.
func checkDigest(what, d string) error {
	if !digestRE.MatchString(d) {
		return fmt.Errorf("%s digest %q is not sha256:<64 hex digits>: %w", what, d, ErrBadImage)
	}
	return nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// verify checks raw against digest d.
func verify(what, d string, raw []byte) error {
	if got := digestOf(raw); got != d {
		return fmt.Errorf("%s %s does not match its digest (the bytes hash to %s): %w", what, d, got, ErrBadImage)
	}
	return nil
}

// readCapped reads r whole, failing past limit bytes.
func readCapped(r io.Reader, what string, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than the %d MiB cap: %w", what, limit>>20, ErrBadImage)
	}
	return b, nil
}

// Media types of indexes and image manifests.
const (
	mediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
)

func isIndex(mt string) bool    { return mt == mediaOCIIndex || mt == mediaDockerList }
func isManifest(mt string) bool { return mt == mediaOCIManifest || mt == mediaDockerManifest }

// resolve walks from an index or manifest (raw, already checked against
// digest d, or the layout's index.json with d "") down to the linux/amd64
// image, checking each step, then reads and checks its config.
func resolve(ctx context.Context, st store, raw []byte, d string) (*Image, error) {
	for depth := 0; ; depth++ {
		m, err := parseManifest(raw)
		if err != nil {
			return nil, err
		}
		if m.isManifest() {
			if d == "" {
				return nil, fmt.Errorf("the layout's index.json is a manifest, not an index: %w", ErrBadImage)
			}
			return imageOf(ctx, st, m, d)
		}
		if depth > maxIndexDepth {
			return nil, fmt.Errorf("image indexes nest more than %d deep: %w", maxIndexDepth, ErrBadImage)
		}
		next, err := pick(m.Manifests)
		if err != nil {
			return nil, err
		}
		if err := checkDigest("manifest", next.Digest); err != nil {
			return nil, err
		}
		if next.Size > MaxManifestBytes {
			return nil, fmt.Errorf("manifest %s is %d bytes, more than the %d MiB cap: %w", next.Digest, next.Size, MaxManifestBytes>>20, ErrBadImage)
		}
		if raw, err = st.manifest(ctx, next.Digest); err != nil {
			return nil, err
		}
		if err := verify("manifest", next.Digest, raw); err != nil {
			return nil, err
		}
		d = next.Digest
	}
}

// pick chooses the linux/amd64 entry of an index: the first with that
// platform, else the first image without a platform.
func pick(entries []descriptor) (descriptor, error) {
	var fallback *descriptor
	for i := range entries {
		e := &entries[i]
		if p := e.Platform; p != nil && (p.OS != "linux" || p.Architecture != "amd64") {
			continue
		}
		switch {
		case isIndex(e.MediaType):
			return *e, nil
		case isManifest(e.MediaType):
			if e.Platform != nil {
				return *e, nil
			}
			if fallback == nil {
				fallback = e
			}
		}
	}
	if fallback == nil {
		return descriptor{}, fmt.Errorf("no linux/amd64 image in the index: %w", ErrBadImage)
	}
	return *fallback, nil
}

// imageOf reads and checks the config of manifest m (digest d).
func imageOf(ctx context.Context, st store, m *manifest, d string) (*Image, error) {
	if err := checkDigest("config", m.Config.Digest); err != nil {
		return nil, err
	}
	if m.Config.Size > MaxConfigBytes {
		return nil, fmt.Errorf("config %s is %d bytes, more than the %d MiB cap: %w", m.Config.Digest, m.Config.Size, MaxConfigBytes>>20, ErrBadImage)
	}
	raw, err := st.small(ctx, m.Config.Digest, m.Config.Size, MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	if err := verify("config", m.Config.Digest, raw); err != nil {
		return nil, err
	}
	cfg, err := parseConfig(raw, len(m.Layers))
	if err != nil {
		return nil, err
	}
	img := &Image{Digest: d, ConfigDigest: m.Config.Digest, Config: *cfg}
	for i, l := range m.Layers {
		if err := checkDigest("layer", l.Digest); err != nil {
			return nil, err
		}
		if l.Size < 0 {
			return nil, fmt.Errorf("layer %s has a negative size: %w", l.Digest, ErrBadImage)
		}
		digest := l.Digest
		img.Layers = append(img.Layers, Layer{Digest: digest, Size: l.Size, DiffID: cfg.RootFS.DiffIDs[i],
			open: func(ctx context.Context) (io.ReadCloser, error) { return st.blob(ctx, digest) }})
		img.LayerBytes += l.Size
	}
	return img, nil
}

// parseConfig reads a config (already checked against its digest) that
// must describe layers layers, each with a diff_id.
func parseConfig(raw []byte, layers int) (*Config, error) {
	var cfg Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("image config: %v: %w", err, ErrBadImage)
	}
	if cfg.OS != "" && cfg.OS != "linux" || cfg.Architecture != "" && cfg.Architecture != "amd64" {
		return nil, fmt.Errorf("image is %s/%s, guests are linux/amd64: %w", cfg.OS, cfg.Architecture, ErrBadImage)
	}
	if len(cfg.RootFS.DiffIDs) != layers {
		return nil, fmt.Errorf("image config lists %d layer diff_ids for %d layers: %w", len(cfg.RootFS.DiffIDs), layers, ErrBadImage)
	}
	if layers > MaxLayers {
		return nil, fmt.Errorf("image has %d layers, more than %d: %w", layers, MaxLayers, ErrBadImage)
	}
	if slices.ContainsFunc(cfg.RootFS.DiffIDs, func(d string) bool { return checkDigest("diff_id", d) != nil }) {
		return nil, fmt.Errorf("image config has a diff_id that is not sha256:<64 hex digits>: %w", ErrBadImage)
	}
	return &cfg, nil
}
