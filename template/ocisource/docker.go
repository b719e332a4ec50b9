package ocisource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// dockerManifest is an entry of a docker archive's manifest.json.
type dockerManifest struct {
	Config string   `json:"Config"`
	Layers []string `json:"Layers"`
}

// openDocker resolves the one image of a docker archive. It has no image
// manifest: the config is read by its file name (its digest computed from
// the bytes read), and the layers are bound to it by their diff_ids.
func openDocker(ctx context.Context, a *archive) (*Image, error) {
	raw, err := readFile(a, "manifest.json", "not a docker archive (no manifest.json)", MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	m, err := parseDockerManifest(raw)
	if err != nil {
		return nil, err
	}
	craw, err := readFile(a, m.Config, "docker archive: its config", MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(craw, len(m.Layers))
	if err != nil {
		return nil, err
	}
	d := digestOf(craw)
	img := &Image{Digest: d, ConfigDigest: d, Config: *cfg}
	for i, name := range m.Layers {
		rc, size, err := a.open(name)
		if err != nil {
			return nil, fmt.Errorf("docker archive: layer %q: %v: %w", name, err, ErrBadImage)
		}
		rc.Close()
		// Docker 25 and later store layers as blobs/sha256/<digest>: a
		// name that is a digest is checked as one too.
		digest := ""
		if hexd, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && checkDigest("layer", "sha256:"+hexd) == nil {
			digest = "sha256:" + hexd
		}
		layerName := name
		img.Layers = append(img.Layers, Layer{Digest: digest, Size: size, DiffID: cfg.RootFS.DiffIDs[i],
			open: func(context.Context) (io.ReadCloser, error) {
				rc, _, err := a.open(layerName)
				return rc, err
			}})
		img.LayerBytes += size
	}
	return img, nil
}

// parseDockerManifest reads manifest.json: a list of exactly one image.
func parseDockerManifest(raw []byte) (*dockerManifest, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	bad := func(err error) (*dockerManifest, error) {
		return nil, fmt.Errorf("not a docker archive: manifest.json: %v: %w", err, ErrBadImage)
	}
	if err := expectDelim(dec, '['); err != nil {
		return bad(err)
	}
	if !dec.More() {
		return bad(fmt.Errorf("no image in it"))
	}
	var m dockerManifest
	if err := dec.Decode(&m); err != nil {
		return bad(err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the docker archive holds more than one image; save one (docker save IMAGE): %w", ErrBadImage)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return bad(err)
	}
	if len(m.Layers) > MaxLayers {
		return nil, fmt.Errorf("image has %d layers, more than %d: %w", len(m.Layers), MaxLayers, ErrBadImage)
	}
	if m.Config == "" {
		return bad(fmt.Errorf("no Config"))
	}
	return &m, nil
}
