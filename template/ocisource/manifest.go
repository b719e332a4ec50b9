package ocisource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// descriptor is what zeish reads of an OCI descriptor: nothing it does not
// use is decoded (annotations, urls), so a crafted one costs no memory.
type descriptor struct {
	MediaType string    `json:"mediaType"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	Platform  *platform `json:"platform"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

// manifest is an image index or an image manifest (one type: an index has
// manifests, a manifest config and layers).
type manifest struct {
	MediaType string
	Config    descriptor
	Layers    []descriptor
	Manifests []descriptor
	hasConfig bool
}

// isManifest tells an image manifest from an index: by its media type, or
// without one (older OCI documents) by its config.
func (m *manifest) isManifest() bool {
	switch {
	case isManifest(m.MediaType):
		return true
	case isIndex(m.MediaType):
		return false
	}
	return m.hasConfig
}

// parseManifest decodes an index or manifest of at most MaxManifestBytes.
// Its lists are decoded one entry at a time and cut at MaxIndexEntries or
// MaxLayers, so a document of millions of empty entries fails early
// instead of filling the heap (json.Unmarshal of a 6 MB index took 907 MiB
// with go-containerregistry's types).
func parseManifest(raw []byte) (*manifest, error) {
	if len(raw) > MaxManifestBytes {
		return nil, fmt.Errorf("manifest of %d bytes is larger than the %d MiB cap: %w", len(raw), MaxManifestBytes>>20, ErrBadImage)
	}
	m := &manifest{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	bad := func(err error) (*manifest, error) {
		return nil, fmt.Errorf("not an image index or manifest: %v: %w", err, ErrBadImage)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return bad(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		switch key, _ := tok.(string); key {
		case "mediaType":
			err = dec.Decode(&m.MediaType)
		case "config":
			m.hasConfig = true
			err = dec.Decode(&m.Config)
		case "layers":
			m.Layers, err = decodeList(dec, MaxLayers, "layers")
		case "manifests":
			m.Manifests, err = decodeList(dec, MaxIndexEntries, "manifests")
		default:
			err = skipValue(dec)
		}
		if err != nil {
			if errors.Is(err, ErrBadImage) {
				return nil, err
			}
			return bad(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return bad(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad(errors.New("data after the document"))
	}
	return m, nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("want %q, got %v", d, tok)
	}
	return nil
}

// decodeList decodes an array of descriptors, at most max of them.
func decodeList(dec *json.Decoder, max int, what string) ([]descriptor, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil // null
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("%s is not a list", what)
	}
	out := []descriptor{}
	for dec.More() {
		if len(out) == max {
			return nil, fmt.Errorf("more than %d %s: %w", max, what, ErrBadImage)
		}
		var d descriptor
		if err := dec.Decode(&d); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, expectDelim(dec, ']')
}

// skipValue reads past one JSON value token by token, keeping nothing.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
