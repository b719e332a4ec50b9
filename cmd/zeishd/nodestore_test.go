package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodestore"
)

// A node agent opens no database when its control plane speaks 2.3 (a
// database URL set anyway is unused, with a warning); with a control plane
// of 2.2 it opens the database as nodes of 2.2 do, and needs its URL.
func TestNodeStoreFollowsTheAgreedVersion(t *testing.T) {
	ctx := context.Background()
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctl := newControls([]string{"http://127.0.0.1:1"}, nil)
	for _, c := range []struct {
		name  string
		minor uint32
		dbURL string
		want  string // the error, "" for a node store
		warn  string
	}{
		{"2.3", nodeapi.MinorStore, "", "", ""},
		{"2.3 with a database URL", nodeapi.MinorStore, "postgres://db.invalid/zeish", "", "ZEISH_DATABASE_URL is set on this node agent but unused"},
		{"2.2 without a database URL", nodeapi.MinorImages, "", "ZEISH_DATABASE_URL", "without store calls"},
	} {
		logs.Reset()
		dir := t.TempDir()
		st, err := nodeStore(ctx, log, &config.Config{DatabaseURL: c.dbURL}, ctl, c.minor, dir)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "":
			if _, ok := st.(*nodestore.Store); !ok {
				t.Errorf("%s: a %T, want the node's store over the control plane", c.name, st)
			}
			if _, err := os.Stat(filepath.Join(dir, "vmstate", "sandboxes")); err != nil {
				t.Errorf("%s: no private state dir: %v", c.name, err)
			}
		case err == nil || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
		if !strings.Contains(logs.String(), c.warn) {
			t.Errorf("%s: log %q lacks %q", c.name, logs.String(), c.warn)
		}
	}
}
