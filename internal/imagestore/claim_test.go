package imagestore_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
)

// TestClaimWaitsForASweepInProgress: a node's claim before a fetch waits
// while a sweep that began before it may still be deleting, and returns
// once that sweep has ended.
func TestClaimWaitsForASweepInProgress(t *testing.T) {
	ctx := context.Background()
	b, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := imagestore.New(b, imagestore.Options{GCWindow: time.Hour})
	// A sweep in progress, as it announces itself.
	if err := b.Put(ctx, "gc/sweep-test", []byte("{}"), sha256.Sum256([]byte("{}"))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.ClaimAndWait(ctx, "node-1", []string{"img_a"}) }()
	select {
	case err := <-done:
		t.Fatalf("the claim returned while a sweep announced before it was in progress: %v", err)
	case <-time.After(time.Second):
	}
	b.Delete(ctx, "gc/sweep-test") // the sweep ends
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the claim did not return after the sweep ended")
	}
}
