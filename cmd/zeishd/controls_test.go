package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
)

// replica answers heartbeats and counts them.
type replica struct {
	nodev2connect.UnimplementedControlHandler
	beats int
	code  connect.Code // non-zero: answer this error
	auth  string       // the Authorization of the last call
}

func (r *replica) Heartbeat(_ context.Context, req *connect.Request[nodev2.HeartbeatRequest]) (*connect.Response[nodev2.HeartbeatReply], error) {
	r.beats++
	r.auth = req.Header().Get("Authorization")
	if r.code != 0 {
		return nil, connect.NewError(r.code, nil)
	}
	return connect.NewResponse(&nodev2.HeartbeatReply{}), nil
}

func TestControlsFailover(t *testing.T) {
	start := func(r *replica) *httptest.Server {
		mux := http.NewServeMux()
		mux.Handle(nodev2connect.NewControlHandler(r))
		s := httptest.NewServer(mux)
		t.Cleanup(s.Close)
		return s
	}
	a, b := &replica{}, &replica{}
	sa, sb := start(a), start(b)
	c := newControls(urls(sa.URL+", "+sb.URL+"/"), http.DefaultClient)
	c.setCredential("znc_n1.secret")
	beat := func() error {
		_, err := c.Heartbeat(context.Background(), connect.NewRequest(&nodev2.HeartbeatRequest{NodeId: "n1"}))
		return err
	}
	if err := beat(); err != nil || a.beats != 1 || b.beats != 0 || a.auth != "Bearer znc_n1.secret" {
		t.Fatalf("first replica: %v (%d, %d)", err, a.beats, b.beats)
	}
	sa.Close() // replica a is gone: b takes the heartbeats, and keeps them
	if err := beat(); err != nil || b.beats != 1 {
		t.Fatalf("failover: %v (%d)", err, b.beats)
	}
	if err := beat(); err != nil || b.beats != 2 {
		t.Fatalf("after failover: %v (%d)", err, b.beats)
	}
	// An answer, even a refusal, is not a reason to ask another replica.
	b.code = connect.CodeNotFound
	if err := beat(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("refusal: %v", err)
	}
}
