package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/config"
	"github.com/zeish/zeish/internal/node/images"
)

// TestImageStoreSettings: ZEISH_IMAGE_STORE unset is the single-host
// default (no store); a folder store opens with ZEISH_IMAGE_FETCH_WAIT, and
// so does an S3 store that cannot be reached yet; a bad wait
// (config.Load), keys in the URL or an unknown scheme stop zeishd at
// start (wrong keys: e2e's TestClusterImageStoreFaults).
func TestImageStoreSettings(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	for _, tc := range []struct {
		store, wait string
		want        time.Duration // the fetch wait of the store opened; 0: none
		wantErr     string
	}{
		{store: ""},
		{store: "file://" + dir, want: 5 * time.Minute},
		{store: "file://" + dir, wait: "30s", want: 30 * time.Second},
		{store: "file://" + dir, wait: "soon", wantErr: "ZEISH_IMAGE_FETCH_WAIT"},
		{store: "file://" + dir, wait: "-1s", wantErr: "ZEISH_IMAGE_FETCH_WAIT"},
		{store: "s3://key:secret@bucket/prefix?endpoint=http://127.0.0.1:1", wantErr: "ZEISH_IMAGE_STORE"},
		// Nothing listens on port 1: a store away at start is logged, and
		// zeishd starts without it until it answers.
		{store: "s3://bucket/prefix?endpoint=http://127.0.0.1:1", want: 5 * time.Minute},
		{store: "ftp://host/images", wantErr: "ZEISH_IMAGE_STORE"},
	} {
		env := map[string]string{"ZEISH_IMAGE_STORE": tc.store, "ZEISH_IMAGE_FETCH_WAIT": tc.wait}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		cfg, err := config.Load(nil, lookup, config.Host{DataDir: t.TempDir(), MemoryMiB: 8 << 10})
		var r *images.Remote
		if err == nil {
			r, err = openImageStore(ctx, log, cfg, t.TempDir())
		}
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s, wait %q: %v, want an error naming %s", tc.store, tc.wait, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s, wait %q: %v", tc.store, tc.wait, err)
		case tc.want == 0 && r != nil:
			t.Errorf("unset: a store %v", r.Store)
		case tc.want != 0 && (r == nil || r.WaitDurable != tc.want):
			t.Errorf("%s, wait %q: %+v, want a store waiting %v", tc.store, tc.wait, r, tc.want)
		}
	}
}
