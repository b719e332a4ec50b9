package server_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/zeish/zeish/internal/control"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/server"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// Paging through GET /public/sandboxes gives every sandbox once, in order,
// and only the account's; bad paging parameters are refused.
func TestListPages(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := map[string]string{}
	for _, name := range []string{"mine", "theirs"} {
		acct := sandbox.NewID(sandbox.PrefixAccount)
		if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: name, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		key, hash := control.NewAPIKey()
		if err := st.CreateAPIKey(ctx, store.APIKey{ID: sandbox.NewID(sandbox.PrefixKey), AccountID: acct, Hash: hash, Prefix: key[:8], CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		keys[name] = key
		t0 := time.Now().UTC()
		for i := range 7 {
			if err := st.CreateSandboxes(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox),
				Name: fmt.Sprintf("%s-%d", name, i), AccountID: acct, State: sandbox.StateStopped, CreatedAt: t0.Add(time.Duration(i) * time.Second)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := server.NewForTest(t, st, nil, dir), error(nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	c := zeish.NewClient(ts.URL+api.BasePath, keys["mine"])

	var names []string
	after, pages := "", 0
	for {
		page, next, err := c.ListSandboxesPage(ctx, zeish.ListOptions{}, 3, after)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, sb := range page {
			names = append(names, sb.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	want := []string{"mine-0", "mine-1", "mine-2", "mine-3", "mine-4", "mine-5", "mine-6"}
	if fmt.Sprint(names) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("paged: %v in %d pages, want %v in 3", names, pages, want)
	}
	for _, bad := range []struct {
		limit int
		after string
	}{{0, ""}, {api.MaxListLimit + 1, ""}, {5, "mine-3"}, {5, "sbx_short"}} {
		if _, _, err := c.ListSandboxesPage(ctx, zeish.ListOptions{}, bad.limit, bad.after); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("limit %d after %q: %v, want invalid_argument", bad.limit, bad.after, err)
		}
	}
}
