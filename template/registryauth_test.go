package template

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/zeish/zeish/internal/dialguard"
)

// loopback is a registry guard that opens loopback, where test registries
// listen.
func loopback(t testing.TB) *dialguard.Guard {
	g, err := dialguard.New([]string{"127.0.0.0/8"}, []string{"127.0.0.0/8", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestRegistryCredentials(t *testing.T) {
	for _, c := range []struct{ secret, user, pass, token string }{
		{"bob:hunter2", "bob", "hunter2", ""},
		{"bob:pa:ss", "bob", "pa:ss", ""}, // split at the first colon
		{":pw", "", "pw", ""},
		{"ghp_abc123", "", "", "ghp_abc123"},
	} {
		u, p, tok := RegistryCredentials(c.secret)
		if u != c.user || p != c.pass || tok != c.token {
			t.Errorf("%q: %q %q %q, want %q %q %q", c.secret, u, p, tok, c.user, c.pass, c.token)
		}
	}
}

// A token secret reaches the registry as a bearer token; a wrong one is the
// registry's 401 (ErrRegistryAuth).
func TestRegistryBearerToken(t *testing.T) {
	const token = "tok-5b1f"
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token && r.Method == http.MethodGet {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/a/b:latest"
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.ParseReference(ref)
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := openImage(ctx, Source{Transport: TransportRegistry, Ref: ref, Token: token}, loopback(t)); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if _, err := openImage(ctx, Source{Transport: TransportRegistry, Ref: ref, Token: "wrong"}, loopback(t)); !errors.Is(err, ErrRegistryAuth) {
		t.Fatalf("with a wrong token: %v, want ErrRegistryAuth", err)
	}
}
