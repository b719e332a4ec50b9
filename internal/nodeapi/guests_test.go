package nodeapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/sandbox"
)

// fakeTemplates builds by reading the upload whole; its log is a fixed list.
type fakeTemplates struct {
	mu        sync.Mutex
	got       catalog.BuildRequest
	upload    []byte
	uploadErr error
	log       []catalog.Event
}

func (f *fakeTemplates) Build(_ context.Context, req catalog.BuildRequest) (sandbox.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = req
	if req.Upload != nil {
		b, err := io.ReadAll(req.Upload)
		f.uploadErr = err
		if err != nil {
			return sandbox.Template{}, fmt.Errorf("upload: %w: %w", errdefs.ErrInvalidArgument, err)
		}
		f.upload = b
	}
	return sandbox.Template{ID: "tpl_1", Name: req.Name, AccountID: req.AccountID, State: sandbox.TemplateBuilding, Host: "n1",
		Kernel: "/a/path/on/the/node"}, nil
}

func (f *fakeTemplates) Delete(_ context.Context, accountID, ref string) (sandbox.Template, error) {
	if ref != "tpl_1" {
		return sandbox.Template{}, fmt.Errorf("template %s: %w", ref, errdefs.ErrNotFound)
	}
	return sandbox.Template{ID: ref, AccountID: accountID, State: sandbox.TemplateDeleted}, nil
}

func (f *fakeTemplates) Follow(ctx context.Context, id string, from int, fn func(catalog.Event) error) error {
	for _, e := range f.log[from:] {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// A template build crosses as its spec and then its upload in chunks, as
// it is read (an upload of several chunks arrives whole); its log streams
// back event by event; a delete is a typed call; and a node's answer never
// carries the paths of the template's files.
func TestTemplatesOverTheWire(t *testing.T) {
	f := &fakeTemplates{log: []catalog.Event{
		{Time: time.Now().UTC(), Type: "progress", Message: "layer 1"},
		{Time: time.Now().UTC(), Type: "state", Template: &sandbox.Template{ID: "tpl_1", State: sandbox.TemplateReady}},
	}}
	key := new(CallKey)
	key.Set("tok")
	mux := http.NewServeMux()
	mux.Handle(Handler(&fakeNode{}, nil, key, f))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	n := NewRemoteNode("n1", srv.URL, "tok", ProtocolMinor, srv.Client())
	ctx := context.Background()

	upload := bytes.Repeat([]byte("0123456789abcdef"), 3*uploadChunk/16+1234) // 3 chunks and a bit
	tpl, err := n.BuildTemplate(ctx, catalog.BuildRequest{AccountID: "acc_a", Name: "img", DiskMiB: 256,
		Upload: bytes.NewReader(upload), RegistrySecret: "reg"})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if sha256.Sum256(f.upload) != sha256.Sum256(upload) || f.got.Name != "img" || f.got.DiskMiB != 256 || f.got.RegistrySecret != "reg" {
		t.Fatalf("the node got %d bytes (want %d) and %+v", len(f.upload), len(upload), f.got)
	}
	f.mu.Unlock()
	if tpl.ID != "tpl_1" || tpl.Host != "n1" || tpl.Kernel != "" {
		t.Fatalf("template answered: %+v", tpl)
	}
	var got []catalog.Event
	if err := n.FollowTemplate(ctx, "tpl_1", 0, func(e catalog.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Message != "layer 1" || got[1].Template.State != sandbox.TemplateReady {
		t.Fatalf("log: %+v", got)
	}
	if del, err := n.DeleteTemplate(ctx, "acc_a", "tpl_1"); err != nil || del.State != sandbox.TemplateDeleted {
		t.Fatalf("delete: %+v %v", del, err)
	}
	if _, err := n.DeleteTemplate(ctx, "acc_a", "tpl_2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete of an unknown template: %v", err)
	}
	// An upload the control plane cannot read to its end fails the build.
	broken := io.MultiReader(bytes.NewReader(upload[:uploadChunk+10]), errReader{})
	if _, err := n.BuildTemplate(ctx, catalog.BuildRequest{Name: "broken", Upload: broken}); err == nil {
		t.Fatal("a build whose upload broke off succeeded")
	}
	srv.Close() // waits for the node's handlers to end
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.got.Name == "broken" && f.uploadErr == nil {
		t.Fatalf("the node read a broken upload of %d bytes as whole", len(f.upload))
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("client went away") }
