package ocisource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/zeish/zeish/internal/dialguard"
)

// Registry says how to reach a registry.
type Registry struct {
	Auth authn.Authenticator // nil: anonymous
	// Transport carries every request; it must refuse blocked addresses
	// (dialguard.Guard.Transport): Open refuses a registry source without.
	Transport http.RoundTripper
}

// registryStore reads blobs of one repository.
type registryStore struct {
	repo name.Repository
	opts []remote.Option
}

func openRegistry(ctx context.Context, ref string, reg Registry) (*Image, error) {
	if reg.Transport == nil {
		return nil, fmt.Errorf("no guarded transport for registry pulls: %w", ErrRegistryBlocked)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrBadSource)
	}
	auth := reg.Auth
	if auth == nil {
		auth = authn.Anonymous
	}
	st := &registryStore{repo: r.Context(), opts: []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth),
		remote.WithTransport(capManifests{reg.Transport})}}
	desc, err := remote.Get(r, st.opts...)
	if err != nil {
		return nil, pullErr(ref, err)
	}
	raw := desc.Manifest
	if len(raw) > MaxManifestBytes {
		return nil, fmt.Errorf("manifest of %s is larger than the %d MiB cap: %w", ref, MaxManifestBytes>>20, ErrBadImage)
	}
	d := digestOf(raw)
	if byDigest, ok := r.(name.Digest); ok {
		if err := verify("manifest", byDigest.DigestStr(), raw); err != nil {
			return nil, err
		}
	}
	return resolve(ctx, st, raw, d)
}

// pullErr classes a registry client's error.
func pullErr(ref string, err error) error {
	var terr *transport.Error
	switch {
	case errors.Is(err, dialguard.ErrBlocked):
		return fmt.Errorf("%s: %v: %w", ref, err, ErrRegistryBlocked)
	case errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%s: the registry answered %d: %v: %w", ref, terr.StatusCode, err, ErrRegistryAuth)
	case errors.Is(err, ErrBadImage), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("pull %s: %v: %w", ref, err, ErrBadImage)
}

func (s *registryStore) manifest(ctx context.Context, d string) ([]byte, error) {
	desc, err := remote.Get(s.repo.Digest(d), append(s.opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, pullErr(s.repo.String()+"@"+d, err)
	}
	return desc.Manifest, nil
}

func (s *registryStore) small(ctx context.Context, d string, _, limit int64) ([]byte, error) {
	rc, err := s.blob(ctx, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := readCapped(rc, "blob "+d, limit)
	if err != nil && !errors.Is(err, ErrBadImage) {
		return nil, pullErr(s.repo.String()+"@"+d, err)
	}
	return b, err
}

func (s *registryStore) blob(ctx context.Context, d string) (io.ReadCloser, error) {
	l, err := remote.Layer(s.repo.Digest(d), append(s.opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, pullErr(s.repo.String()+"@"+d, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, pullErr(s.repo.String()+"@"+d, err)
	}
	return rc, nil
}

// capManifests cuts a manifest response at MaxManifestBytes (the registry
// client would read 100 MiB), before it is held whole.
type capManifests struct{ rt http.RoundTripper }

func (c capManifests) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.Path, "/manifests/") || req.Method == http.MethodHead {
		return resp, err
	}
	if resp.ContentLength > MaxManifestBytes {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: a manifest of %d bytes, more than the %d MiB cap: %w", req.URL.Redacted(), resp.ContentLength, MaxManifestBytes>>20, ErrBadImage)
	}
	resp.Body = &cappedBody{rc: resp.Body, left: MaxManifestBytes}
	return resp, nil
}

type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte past the cap tells a larger manifest
	}
	n, err := b.rc.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return 0, fmt.Errorf("a manifest larger than the %d MiB cap: %w", MaxManifestBytes>>20, ErrBadImage)
	}
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
