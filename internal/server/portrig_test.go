package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// portNode is a node whose guests' ports are servers of the test: guest
// port P of every sandbox is ports[P].
type portNode struct {
	control.Node
	ports map[int]string
}

func (n *portNode) PortAddr(_ *store.SandboxRecord, port int) (string, error) {
	return n.ports[port], nil
}

func (n *portNode) Capabilities() vmm.Capabilities { return vmm.Capabilities{} }

// portRig is a server with running sandboxes whose ports lead to the
// test's own servers, reached through a real listener.
type portRig struct {
	t     testing.TB
	st    store.Store
	ctl   *control.Control
	srv   *Server
	url   string // the server's base URL (http://127.0.0.1:port)
	node  *portNode
	token map[string]string // sandbox id → data-plane token
	key   map[string]string // sandbox id → an API key of its account
}

// newPortRig serves opts (Control filled in: over the rig's store and
// node, with calls, nil for control's defaults) with one account per entry
// of accounts, each with that many sandboxes whose listed ports are
// public.
func newPortRig(t testing.TB, opts Options, calls *control.CallLimits, accounts []int, public ...int) (*portRig, [][]string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rig := &portRig{t: t, st: st, node: &portNode{ports: map[int]string{}}, token: map[string]string{}, key: map[string]string{}}
	tokenKey, err := control.TokenKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	rig.ctl = control.New(control.Options{Store: st, Node: rig.node, TokenKey: tokenKey, Calls: calls})
	opts.Control = rig.ctl
	rig.srv = New(opts)
	var ids [][]string
	for _, n := range accounts {
		acct := sandbox.NewID(sandbox.PrefixAccount)
		if err := st.CreateAccount(ctx, store.Account{ID: acct, Name: acct, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		key := sandbox.NewID(sandbox.PrefixKey)
		secret, hash := control.NewAPIKey()
		if err := st.CreateAPIKey(ctx, store.APIKey{ID: key, AccountID: acct, Hash: hash, Prefix: "zk_", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		who, err := rig.ctl.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for range n {
			sb := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), Name: sandbox.NewID("n"),
				AccountID: acct, State: sandbox.StateRunning, CreatedAt: time.Now(), PublicPorts: public}}
			if err := st.CreateSandboxes(ctx, sb); err != nil {
				t.Fatal(err)
			}
			if rig.token[sb.ID], err = rig.ctl.TokenUntil(ctx, who, sb.ID, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			rig.key[sb.ID] = secret
			mine = append(mine, sb.ID)
		}
		ids = append(ids, mine)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, lln := HTTPServer(ln, rig.srv.Handler(), DefaultLimits)
	go hs.Serve(lln)
	t.Cleanup(func() { hs.Close() })
	rig.url = "http://" + ln.Addr().String()
	return rig, ids
}

// guest makes port of every sandbox lead to h.
func (p *portRig) guest(port int, h http.Handler) {
	g := httptest.NewServer(h)
	p.t.Cleanup(g.Close)
	p.node.ports[port] = g.Listener.Addr().String()
}

// silentGuest makes port of every sandbox lead to a listener that accepts
// connections and never says a word; it returns the connections it took.
func (p *portRig) silentGuest(port int) <-chan net.Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	conns := make(chan net.Conn, 1024)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	p.t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	})
	p.node.ports[port] = ln.Addr().String()
	return conns
}

// request is a request to the rig's listener with Host host ("": the
// listener's address).
func (p *portRig) request(method, host, path string) *http.Request {
	req, err := http.NewRequest(method, p.url+path, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	return req
}

func portPath(id string, port int, rest string) string {
	return "/data/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + rest
}
