package images

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/blob/folder"
)

// TestNodesClaimWhatTheyHold: with no record naming them, a node's images
// (made, or fetched with the layer below) stay in the store while a node
// that holds them claims them; a claim of a child keeps its parent's
// layer (Needs); once no node claims them, the sweep deletes them.
func TestNodesClaimWhatTheyHold(t *testing.T) {
	ctx := context.Background()
	b, err := folder.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared := imagestore.New(b, imagestore.Options{SweepGrace: time.Nanosecond, Needs: Needs})
	a, c := sharedRig(t, shared), sharedRig(t, shared)
	c.opts.Host = "node-2"
	c.s = New(c.opts)
	base := filepath.Join(t.TempDir(), "base.img")
	os.WriteFile(base, []byte("a template's disk"), 0o600)
	mem := make([]byte, 1<<20)
	rand.Read(mem)
	parent := a.portableImage(base, mem)
	child := a.portableImage(a.s.LayerPath(parent.ID), mem, parent.ID)
	for _, m := range []*Meta{parent, child} {
		a.s.Publish(m)
		if err := a.s.WaitUploaded(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.s.Fetch(ctx, child.ID, false, nil); err != nil { // claims it first
		t.Fatal(err)
	}
	if err := a.s.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3200 * time.Millisecond)    // past the grace and the store's slack
	if err := c.s.Claim(ctx); err != nil { // node-2 renews; node-1's claim is now stale
		t.Fatal(err)
	}
	none := func(context.Context) (map[string]bool, error) { return map[string]bool{}, nil }
	st, err := shared.Sweep(ctx, none)
	if err != nil || st.Swept != 0 || st.Claimed != 2 || st.Claims != 1 {
		t.Fatalf("sweep while node-2 holds the images: %+v, %v; want both kept by its claim", st, err)
	}
	// node-2 lost too; a third node claims only the child: its layer stays with it.
	shared.Unclaim(ctx, "node-2")
	if _, err := shared.Claim(ctx, "node-3", []string{child.ID}); err != nil {
		t.Fatal(err)
	}
	if st, err := shared.Sweep(ctx, none); err != nil || st.Swept != 0 {
		t.Fatalf("sweep with the child claimed: %+v, %v; want its parent's layer kept", st, err)
	}
	shared.Unclaim(ctx, "node-3")
	if st, err := shared.Sweep(ctx, none); err != nil || st.Swept != 2 {
		t.Fatalf("sweep once no node claims them: %+v, %v; want both deleted", st, err)
	}
}

// TestNeeds: an image stands on its disk chain and on its template's files.
func TestNeeds(t *testing.T) {
	for _, tc := range []struct {
		meta string
		want []string
	}{
		{``, nil},
		{`{"id":"img_a"}`, nil},
		{`{"id":"img_a","layers":["img_1","img_2"]}`, []string{"img_1", "img_2"}},
		{`{"id":"img_a","layers":["img_1"],"template":"tpl_x","template_hash":"h"}`, []string{"img_1", "tpl-tpl_x"}},
		// A template's own manifest names it: it needs itself, which keeps
		// nothing that is not kept already.
		{`{"template":"tpl_x","hash":"h"}`, []string{"tpl-tpl_x"}},
	} {
		got, err := Needs(&imagestore.Manifest{Meta: []byte(tc.meta)})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Needs(%s) = %v, %v; want %v", tc.meta, got, err, tc.want)
		}
	}
	if _, err := Needs(&imagestore.Manifest{Meta: []byte(`{"layers":`)}); err == nil {
		t.Error("Needs of unreadable meta: no error")
	}
}
