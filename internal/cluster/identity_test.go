package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

// registry is a control plane's Control service on a fresh store.
type registry struct {
	t     testing.TB
	st    *sqlite.Store
	reg   *Registry
	url   string
	ctl   nodev2connect.ControlClient // without a credential
	clock time.Time
}

func newRegistry(t testing.TB, allowHTTP bool) *registry {
	st := testenv.SQLite(t)
	reg := &Registry{Nodes: st, Key: master, AllowHTTP: allowHTTP, Every: time.Second}
	mux := http.NewServeMux()
	mux.Handle(reg.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &registry{t: t, st: st, reg: reg, url: srv.URL, ctl: nodev2connect.NewControlClient(http.DefaultClient, srv.URL)}
}

// as is the Control service called with credential cred.
func (g *registry) as(cred string) nodev2connect.ControlClient {
	return nodev2connect.NewControlClient(http.DefaultClient, g.url, connect.WithInterceptors(nodeapi.Bearer(cred)))
}

// token makes a join token for node id ("" any), valid for ttl.
func (g *registry) token(id string, ttl time.Duration) string {
	g.t.Helper()
	rec, text, err := NewJoinToken(id, ttl, time.Now())
	if err != nil {
		g.t.Fatal(err)
	}
	if err := g.st.CreateJoinToken(context.Background(), rec); err != nil {
		g.t.Fatal(err)
	}
	return text
}

func (g *registry) join(token, id string) (string, error) {
	rep, err := g.ctl.Join(context.Background(), connect.NewRequest(&nodev2.JoinRequest{JoinToken: token, NodeId: id}))
	if err != nil {
		return "", nodeapi.FromWire("control", err)
	}
	return rep.Msg.Credential, nil
}

// joined is node id's credential, from a join with a token made for it.
func (g *registry) joined(id string) string {
	g.t.Helper()
	cred, err := g.join(g.token(id, time.Hour), id)
	if err != nil {
		g.t.Fatal(err)
	}
	return cred
}

func register(c nodev2connect.ControlClient, id, url string) (*nodev2.RegisterReply, error) {
	rep, err := c.Register(context.Background(), connect.NewRequest(&nodev2.RegisterRequest{Version: nodeapi.Ours(),
		NodeId: id, Url: url, Region: "eu", Healthy: true, Capacity: &nodev2.Capacity{MemoryBudgetMib: 4096}}))
	if err != nil {
		return nil, nodeapi.FromWire("control", err)
	}
	return rep.Msg, nil
}

// A join token is used once, before it expires, by the node it names (or
// any new one); a token for any node cannot take over one that has
// joined; a token made for a node replaces its credential, and the old
// one stops working.
func TestJoin(t *testing.T) {
	g := newRegistry(t, true)
	anyNode := g.token("", time.Hour)
	cred, err := g.join(anyNode, "n1")
	if err != nil || !CredentialOf(cred, "n1") {
		t.Fatalf("join: %q %v", cred, err)
	}
	if _, err := register(g.as(cred), "n1", "http://n1:7421"); err != nil {
		t.Fatalf("register with the new credential: %v", err)
	}
	expired := g.token("", time.Nanosecond)
	time.Sleep(time.Millisecond)
	forN2 := g.token("n2", time.Hour)
	cases := []struct {
		name, token, node string
		want              *errdefs.Error
	}{
		{"used twice", anyNode, "n3", errdefs.ErrUnauthenticated},
		{"expired", expired, "n3", errdefs.ErrTokenExpired},
		{"for another node", forN2, "n3", errdefs.ErrForbidden},
		{"any node, but n1 has joined", g.token("", time.Hour), "n1", errdefs.ErrForbidden},
		{"unknown", "zjt_0000.secret", "n3", errdefs.ErrUnauthenticated},
		{"wrong secret", strings.SplitN(forN2, ".", 2)[0] + ".guess", "n2", errdefs.ErrUnauthenticated},
		{"not a token", "hello", "n3", errdefs.ErrUnauthenticated},
		{"bad node id", g.token("", time.Hour), "N 3", errdefs.ErrInvalidArgument},
	}
	for _, c := range cases {
		if _, err := g.join(c.token, c.node); errdefs.Of(err) != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want.Code)
		}
	}
	if _, err := g.st.GetNode(context.Background(), "n3"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused join left node n3: %v", err)
	}
	// The refused token for n2 was not spent.
	if _, err := g.join(forN2, "n2"); err != nil {
		t.Fatalf("n2's own token after refusals: %v", err)
	}
	// A token made for n1 gives it a new credential; the old one is refused.
	fresh := g.joined("n1")
	if _, err := register(g.as(cred), "n1", "http://n1:7421"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("the replaced credential: %v", err)
	}
	if _, err := register(g.as(fresh), "n1", "http://n1:7421"); err != nil {
		t.Fatalf("the new credential: %v", err)
	}
}

// Finding (SECURITY.md, node identity): a holder of the shared node token
// could register any node id with its own URL, and so receive that node's
// placements and the secrets of its creates. A node's credential now acts
// as its own id only, for registration and heartbeats alike; none at all,
// or a revoked one, is refused, and the victim's row is untouched.
func TestNodeActsAsItsOwnIDOnly(t *testing.T) {
	g := newRegistry(t, true)
	ctx := context.Background()
	victim, attacker := g.joined("victim"), g.joined("attacker")
	if _, err := register(g.as(victim), "victim", "http://victim:7421"); err != nil {
		t.Fatal(err)
	}
	if _, err := register(g.as(attacker), "victim", "http://evil:7421"); !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("register as another node: %v", err)
	}
	beat := func(c nodev2connect.ControlClient, id string) error {
		_, err := c.Heartbeat(ctx, connect.NewRequest(&nodev2.HeartbeatRequest{NodeId: id, Healthy: false}))
		return nodeapi.FromWire("control", err)
	}
	if err := beat(g.as(attacker), "victim"); !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("heartbeat as another node: %v", err)
	}
	for name, c := range map[string]nodev2connect.ControlClient{
		"no credential":  g.ctl,
		"made up":        g.as("znc_victim.made-up"),
		"not one at all": g.as("e2e-cluster-node-token-0123456789"),
	} {
		if _, err := register(c, "victim", "http://evil:7421"); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("register with %s: %v", name, err)
		}
	}
	n, err := g.st.GetNode(ctx, "victim")
	if err != nil || n.URL != "http://victim:7421" || !n.Healthy {
		t.Fatalf("the victim's row after the attempts: %+v %v", n, err)
	}
	// Revoked (zeishd revoke-node): refused from then on.
	if _, err := g.st.UpdateNode(ctx, "victim", func(n *store.NodeRecord) error { n.CredentialHash = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := beat(g.as(victim), "victim"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("heartbeat with a revoked credential: %v", err)
	}
}

// Finding: every Register reply handed out the data-plane token key and
// the secrets key of the whole cluster. A reply now carries this node's
// own keys only: derived for its id (none is another node's, nor the
// control plane's key), and no secrets key in any field.
func TestRegisterGivesThisNodesKeysOnly(t *testing.T) {
	g := newRegistry(t, true)
	a, err := register(g.as(g.joined("a")), "a", "http://a:7421")
	if err != nil {
		t.Fatal(err)
	}
	b, err := register(g.as(g.joined("b")), "b", "http://b:7421")
	if err != nil {
		t.Fatal(err)
	}
	if string(a.TokenKey) == string(b.TokenKey) || string(a.TokenKey) == string(master) || len(a.TokenKey) < 32 {
		t.Fatalf("data-plane keys: a %x, b %x", a.TokenKey, b.TokenKey)
	}
	if a.CallKey == b.CallKey || a.CallKey == "" || a.CallKey != CallKey(master, "a") {
		t.Fatalf("call keys: a %q, b %q", a.CallKey, b.CallKey)
	}
	fields := a.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if name := string(fields.Get(i).Name()); strings.Contains(name, "secret") {
			t.Fatalf("the register reply has a field %q", name)
		}
	}
}

// Finding: http:// node URLs were accepted, so the credentials of both
// directions and the data plane's tokens crossed the network in the
// clear. Only https:// is, unless the control plane allows http
// (ZEISH_CLUSTER_ALLOW_HTTP, for a private network or a test).
func TestNodeURLsAreHTTPS(t *testing.T) {
	for _, c := range []struct {
		allow bool
		url   string
		want  *errdefs.Error
	}{
		{false, "http://n1:7421", errdefs.ErrInvalidArgument},
		{false, "https://n1:7421", nil},
		{true, "http://n1:7421", nil},
		{true, "ftp://n1:7421", errdefs.ErrInvalidArgument},
		{false, "https://", errdefs.ErrInvalidArgument},
	} {
		g := newRegistry(t, c.allow)
		_, err := register(g.as(g.joined("n1")), "n1", c.url)
		if (c.want == nil && err != nil) || (c.want != nil && errdefs.Of(err) != c.want) {
			t.Errorf("allow http %v, url %s: %v", c.allow, c.url, err)
		}
	}
}

// Finding: any holder of the node token could call any node as the
// control plane (and act for any account through the forwarded routes).
// The control plane calls each node with that node's own call key, which
// the node learns at registration: node b's key, the only one b has, is
// refused by node a.
func TestNodeCannotCallAnotherAsTheControlPlane(t *testing.T) {
	st := testenv.SQLite(t)
	serveNode := func(id string) string {
		key := new(nodeapi.CallKey)
		key.Set(CallKey(master, id))
		mux := http.NewServeMux()
		mux.Handle(nodeapi.Handler(&fakeNode{id: id, st: st}, nodeapi.NewDelivered(st), key, nil))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	urlA := serveNode("a")
	serveNode("b")
	ctx := context.Background()
	rec := &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: "x", AccountID: "acc_victim", MemoryMiB: 128}}
	if _, err := nodeapi.NewRemoteNode("a", urlA, CallKey(master, "b"), nodeapi.ProtocolMinor, nil).Create(ctx, rec); !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("node b's key on node a: %v", err)
	}
	if _, err := nodeapi.NewRemoteNode("a", urlA, CallKey(master, "a"), nodeapi.ProtocolMinor, nil).Create(ctx, rec); err != nil {
		t.Fatalf("the control plane's key for a: %v", err)
	}
	// Streamed calls (a template's build log, an upload) take the same
	// key: node b's is refused before the call runs (a's node builds no
	// templates here, which is what a's own key gets told).
	for _, c := range []struct {
		key  string
		want *errdefs.Error
	}{{CallKey(master, "b"), errdefs.ErrInternal}, {CallKey(master, "a"), errdefs.ErrUnavailable}} {
		n := nodeapi.NewRemoteNode("a", urlA, c.key, nodeapi.ProtocolMinor, nil)
		err := n.FollowTemplate(ctx, "tpl_x", 0, func(catalog.Event) error { return nil })
		if errdefs.Of(err) != c.want {
			t.Fatalf("a template's log from node a with key %s…: %v, want %s", c.key[:6], err, c.want.Code)
		}
		_, err = n.BuildTemplate(ctx, catalog.BuildRequest{Name: "t", Upload: strings.NewReader("bytes")})
		if errdefs.Of(err) != c.want {
			t.Fatalf("a template upload to node a with key %s…: %v, want %s", c.key[:6], err, c.want.Code)
		}
	}
}
