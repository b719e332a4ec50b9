package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// fakeNode answers every call with err, or echoes what it got.
type fakeNode struct {
	control.Node
	err error
	got *store.SandboxRecord
}

func (f *fakeNode) Create(_ context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	got := *r
	f.got = &got
	if f.err != nil {
		return nil, f.err
	}
	r.ID = "sbx_made"
	return r, nil
}

func (f *fakeNode) Clone(_ context.Context, _ string, c []*store.SandboxRecord) (time.Duration, []*store.SandboxRecord, error) {
	if f.err != nil {
		return 0, nil, f.err
	}
	return 1500 * time.Microsecond, c, nil
}

func (f *fakeNode) Pause(context.Context, string) (*store.SandboxRecord, error) { return nil, f.err }

func serve(t *testing.T, f *fakeNode, key string) string {
	t.Helper()
	ck := new(CallKey)
	ck.Set(key)
	mux := http.NewServeMux()
	mux.Handle(Handler(f, nil, ck, nil))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Typed errors survive the wire: the code (errors.Is on the sentinel) and
// the node's own words.
func TestErrorsSurviveTheWire(t *testing.T) {
	refusal := &sandbox.Refusal{ID: "sbx_a", Op: sandbox.OpPause, State: sandbox.StateStopped, Needs: sandbox.Needs(sandbox.OpPause)}
	cases := []struct {
		name string
		err  error
		want *errdefs.Error
	}{
		{"node full", fmt.Errorf("host n1 has 0 MiB free: %w", errdefs.ErrNodeFull), errdefs.ErrNodeFull},
		{"lifecycle refusal", refusal, errdefs.ErrInvalidState},
		{"not found", fmt.Errorf("sandbox sbx_x: %w", errdefs.ErrNotFound), errdefs.ErrNotFound},
		{"storage full", fmt.Errorf("shm: %w", errdefs.ErrStorageFull), errdefs.ErrStorageFull},
		{"limit", fmt.Errorf("images: %w", errdefs.ErrLimitReached), errdefs.ErrLimitReached},
		{"a plain error is internal", errors.New("qemu said no"), errdefs.ErrInternal},
		{"reclassed", errdefs.Reclass(fmt.Errorf("spec: %w", errdefs.ErrInvalidArgument), errdefs.ErrInternal), errdefs.ErrInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := serve(t, &fakeNode{err: c.err}, "tok")
			n := NewRemoteNode("n1", url, "tok", ProtocolMinor, nil)
			_, err := n.Pause(context.Background(), "sbx_a")
			if !errors.Is(err, c.want) || errdefs.Of(err) != c.want {
				t.Fatalf("got %v (%s), want %s", err, errdefs.Of(err).Code, c.want.Code)
			}
			if err.Error() != c.err.Error() {
				t.Fatalf("message %q, want the node's %q", err.Error(), c.err.Error())
			}
		})
	}
}

func TestTransportErrors(t *testing.T) {
	url := serve(t, &fakeNode{}, "right")
	if _, err := NewRemoteNode("n1", url, "wrong", ProtocolMinor, nil).Pause(context.Background(), "sbx_a"); errdefs.Of(err) != errdefs.ErrInternal {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := NewRemoteNode("n1", url, "", ProtocolMinor, nil).Pause(context.Background(), "sbx_a"); errdefs.Of(err) != errdefs.ErrInternal {
		t.Fatalf("no token: %v", err)
	}
	// Nobody listens there: the node is unavailable, not the request bad.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := NewRemoteNode("n1", dead.URL, "right", ProtocolMinor, nil).Pause(context.Background(), "sbx_a"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("unreachable node: %v", err)
	}
}

// Records cross in the store's JSON form; secrets, which have none, in
// their own field, with the sealed form the control plane made for the
// id it chose; a new sandbox with secrets but no such id or form is
// refused (the node could not record them).
func TestRecordsCross(t *testing.T) {
	f := &fakeNode{}
	n := NewRemoteNode("n1", serve(t, f, "tok"), "tok", ProtocolMinor, nil)
	in := &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: "a", MemoryMiB: 256, Env: map[string]string{"A": "1"}}, SecretEnv: map[string]string{"TOKEN": "s3"}}
	if _, err := n.Create(context.Background(), in); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("secrets without an id and their sealed form: %v", err)
	}
	in.ID = "sbx_chosen"
	in.SetSealedSecrets("sealed-for-sbx_chosen")
	out, err := n.Create(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if f.got.SecretEnv["TOKEN"] != "s3" || f.got.Env["A"] != "1" || f.got.MemoryMiB != 256 || f.got.ID != "sbx_chosen" {
		t.Fatalf("node got %+v", f.got)
	}
	if out.ID != "sbx_made" || out.SecretEnv != nil {
		t.Fatalf("reply %+v (secrets must not come back)", out)
	}
	pause, made, err := n.Clone(context.Background(), "sbx_p", map[string]string{"TOKEN": "s3"}, []*store.SandboxRecord{in, in})
	if err != nil || len(made) != 2 || pause != 1500*time.Microsecond {
		t.Fatalf("clone: %v %d %v", pause, len(made), err)
	}
}
