package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
)

// waitConn takes the next connection a silent guest accepted, or fails.
func waitConn(t *testing.T, conns <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the guest never got the connection")
		return nil
	}
}

// errorOf reads a response's error code.
func errorOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var e api.ErrorBody
	json.NewDecoder(resp.Body).Decode(&e)
	return e.Error.Code
}

// A silent guest behind a public port holds at most its sandbox's share
// of the data plane, and its account's: requests past either get 429 at
// once (and lose their connection), whoever sends them, exec and TCP
// forwards included, and other accounts are not held up. A request ends
// with 503 timeout when the guest sends no headers in time, and its slot
// is free again.
func TestPortBudget(t *testing.T) {
	const port = 8080
	limits, calls := DataPlaneLimits{PortHeaders: time.Minute}, &control.CallLimits{PerSandbox: 2, PerAccount: 3}
	rig, ids := newPortRig(t, Options{DataPlane: &limits}, calls, []int{2, 1}, port)
	a, b, other := ids[0][0], ids[0][1], ids[1][0]
	conns := rig.silentGuest(port)
	client := &http.Client{Timeout: 2 * time.Minute}
	type result struct {
		resp *http.Response
		err  error
	}
	held := make(chan result, 5)
	var guests []net.Conn
	hold := func(id string) {
		go func() {
			resp, err := client.Get(rig.url + portPath(id, port, "/"))
			held <- result{resp, err}
		}()
		guests = append(guests, waitConn(t, conns))
	}
	refused := func(req *http.Request, want *errdefs.Error) {
		t.Helper()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
		}
		if code := errorOf(t, resp); resp.StatusCode != 429 || code != want.Code || !resp.Close {
			t.Fatalf("%s %s: %d %s (connection close %v), want 429 %s and the connection closed", req.Method, req.URL.Path, resp.StatusCode, code, resp.Close, want.Code)
		}
	}
	hold(a)
	hold(a)
	refused(rig.request("GET", "", portPath(a, port, "/")), errdefs.ErrTooManyRequests)
	exec := rig.request("POST", "", "/data/v1/sandboxes/"+a+"/exec")
	exec.Header.Set("Authorization", "Bearer "+rig.token[a])
	refused(exec, errdefs.ErrTooManyRequests)
	hold(b)
	refused(rig.request("GET", "", portPath(b, port, "/")), errdefs.ErrAccountCalls)
	tcp := rig.request("GET", "", "/data/v1/sandboxes/"+b+"/tcp/8080")
	tcp.Header.Set("Authorization", "Bearer "+rig.token[b])
	refused(tcp, errdefs.ErrAccountCalls)
	hold(other) // another account is not held up

	for _, g := range guests {
		g.Close()
	}
	for range guests {
		if r := <-held; r.err != nil {
			t.Fatal(r.err)
		} else if code := errorOf(t, r.resp); r.resp.StatusCode != 503 {
			t.Fatalf("a request whose guest hung up: %d %s, want 503", r.resp.StatusCode, code)
		}
	}
	hold(a) // its slots are free again

	// A guest that sends no headers in time.
	limits.PortHeaders = 200 * time.Millisecond
	rig, ids = newPortRig(t, Options{DataPlane: &limits}, calls, []int{1}, port)
	rig.silentGuest(port)
	resp, err := client.Get(rig.url + portPath(ids[0][0], port, "/"))
	if err != nil {
		t.Fatal(err)
	}
	if code := errorOf(t, resp); resp.StatusCode != 503 || code != errdefs.ErrTimeout.Code {
		t.Fatalf("a request the guest never answered: %d %s, want 503 timeout", resp.StatusCode, code)
	}
}

// BenchmarkRefusedPortRequest is what a request past its sandbox's budget
// costs: the sandbox's one slot is held by a silent guest, and each
// request (a fresh connection, as the refusal closes it) gets 429 at once
// without reaching the guest. The client's side is included.
func BenchmarkRefusedPortRequest(b *testing.B) {
	const port = 8080
	limits := DataPlaneLimits{PortHeaders: time.Hour}
	rig, ids := newPortRig(b, Options{DataPlane: &limits}, &control.CallLimits{PerSandbox: 1, PerAccount: 100}, []int{1}, port)
	conns := rig.silentGuest(port)
	url := rig.url + portPath(ids[0][0], port, "/")
	go (&http.Client{}).Get(url) // ends when the rig's server closes
	held := <-conns              // kept: a collected conn is closed, and frees the slot
	b.Cleanup(func() { held.Close() })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for b.Loop() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			b.Fatalf("%d, want 429", resp.StatusCode)
		}
	}
}

// A TCP forward ends when its client goes, however silent the guest: both
// sides are closed (the guest sees its connection end) and the forward's
// slot is freed.
func TestTCPForwardEndsWithItsClient(t *testing.T) {
	const port = 5432
	rig, ids := newPortRig(t, Options{}, nil, []int{1}, port)
	id := ids[0][0]
	conns := rig.silentGuest(port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(rig.url, "http")+"/data/v1/sandboxes/"+id+"/tcp/5432", nil)
	if err != nil {
		t.Fatal(err)
	}
	guest := waitConn(t, conns)
	acct := ""
	if rec, err := rig.st.GetSandbox(ctx, id); err == nil {
		acct = rec.AccountID
	}
	if n, _ := rig.ctl.CallsInFlight(id, acct); n != 1 {
		t.Fatalf("%d calls in flight during the forward, want 1", n)
	}
	ws.Close(websocket.StatusNormalClosure, "done")
	guest.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, guest); err != nil {
		t.Fatalf("the guest's connection did not end with the client: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := rig.ctl.CallsInFlight(id, acct); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the forward's slot was never freed")
		}
	}
}

// Splice ends when either side ends, even if the other never says a word
// nor closes (a silent guest, a client that went away).
func TestSpliceEndsWithEitherSide(t *testing.T) {
	for _, first := range []string{"client", "guest"} {
		t.Run(first+" goes", func(t *testing.T) {
			clientFar, clientNear := net.Pipe()
			guestFar, guestNear := net.Pipe()
			done := make(chan struct{})
			go func() { Splice(clientNear, guestNear); close(done) }()
			if first == "client" {
				clientFar.Close()
			} else {
				guestFar.Close()
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the splice outlived its " + first)
			}
			other := guestFar
			if first == "guest" {
				other = clientFar
			}
			if _, err := other.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("the other side is still open: %v", err)
			}
		})
	}
}

// A TCP forward on which nothing moves either way for the idle limit is
// closed; one that moves lives on.
func TestTCPForwardIdle(t *testing.T) {
	const port = 22
	limits := DefaultDataPlane
	limits.Idle = 500 * time.Millisecond
	rig, ids := newPortRig(t, Options{DataPlane: &limits}, nil, []int{1}, port)
	conns := rig.silentGuest(port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(rig.url, "http")+"/data/v1/sandboxes/"+ids[0][0]+"/tcp/22", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	guest := waitConn(t, conns)
	defer guest.Close()
	// Traffic for four idle limits: it must all arrive.
	for i := range 20 {
		if err := ws.Write(ctx, websocket.MessageBinary, []byte{byte(i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(guest, b); err != nil || b[0] != byte(i) {
			t.Fatalf("the guest got %v %v, want %d", b, err, i)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Then silence: the server closes it.
	if _, _, err := ws.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("a silent forward was kept open: %v", err)
	}
}
