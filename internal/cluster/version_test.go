package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/nodeapi/nodev2/nodev2connect"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// oldRegister is a RegisterRequest as a node of protocol 2.minor encodes
// it (minor 1 or 2): the fields 2.1 has, by number (2.2 and 2.3 added no
// field to it).
func oldRegister(nodeID, url string, minor uint64) []byte {
	msg := func(b []byte, num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), body)
	}
	str := func(b []byte, num protowire.Number, s string) []byte { return msg(b, num, []byte(s)) }
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	version := varint(varint(nil, 1, 2), 2, minor)                                // major 2, minor
	capacity := varint(str(varint(varint(nil, 1, 2048), 4, 2), 6, "tcg"), 8, 512) // image_disk_mib: 2.1
	var b []byte
	b = msg(b, 1, version)
	b = str(b, 2, nodeID)
	b = str(b, 3, "eu")
	b = str(b, 5, url)
	b = msg(b, 6, capacity)
	b = varint(b, 7, 1)
	return str(b, 8, fmt.Sprintf("zeishd 2.%d", minor))
}

// A node of the previous minor version still works: its registration, in
// the shape it sends, is accepted at the version it speaks (2.2: it opens
// the database itself, having no store calls), which the registry keeps
// for the router. One two minors behind (2.1) is told to upgrade.
func TestPreviousMinorNodeRegisters(t *testing.T) {
	g := newRegistry(t, true)
	cred := g.joined("old")
	register := func(minor uint64) (*http.Response, []byte) {
		req, err := http.NewRequest("POST", g.url+nodev2connect.ControlRegisterProcedure, bytes.NewReader(oldRegister("old", "http://old:7421", minor)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Authorization", "Bearer "+cred)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	if resp, body := register(1); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "upgrade the node") {
		t.Fatalf("a 2.1 registration with a 2.3 control plane: %s %s", resp.Status, body)
	}
	resp, body := register(2)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a 2.2 registration: %s %s", resp.Status, body)
	}
	var rep nodev2.RegisterReply
	if err := proto.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Version.GetMajor() != 2 || rep.Version.GetMinor() != 2 || rep.CallKey != CallKey(master, "old") {
		t.Fatalf("reply to a 2.2 node: %+v", &rep)
	}
	n, err := g.st.GetNode(context.Background(), "old")
	if err != nil || n.Protocol != "2.2" || n.Capacity.MemoryBudgetMiB != 2048 || n.Capacity.ImageDiskMiB != 512 || n.Version != "zeishd 2.2" {
		t.Fatalf("the 2.2 node's row: %+v %v", n, err)
	}
}

// oldNode is a node agent of protocol 2.1: the calls of 2.1 only, every
// other unimplemented (as a 2.1 build's generated handler answers).
type oldNode struct {
	nodev2connect.UnimplementedNodeHandler
	now nodev2connect.NodeHandler
}

func (o oldNode) Create(ctx context.Context, req *connect.Request[nodev2.CreateRequest]) (*connect.Response[nodev2.SandboxReply], error) {
	return o.now.Create(ctx, req)
}

// The router asks a node only what its agreed version has. A 2.2 node
// (on the database, without store calls) takes a create: the grants sent
// with it are a field it does not know. A node agreed at 2.1 (its row from
// before the control plane's upgrade) is refused a call of 2.2 (a fork's
// children from the image store) before it is sent, saying what to
// upgrade, and neither a create from a template another node built nor a
// start of a sandbox another node stopped is placed on it.
func TestRouterAsksOnlyWhatTheNodesVersionHas(t *testing.T) {
	g := newRegistry(t, true)
	ctx := context.Background()
	key := new(nodeapi.CallKey)
	key.Set(CallKey(master, "old"))
	path, h := nodev2connect.NewNodeHandler(oldNode{now: nodeapi.NewServer(&fakeNode{id: "old", st: g.st}, nodeapi.NewDelivered(g.st), nil)},
		connect.WithInterceptors(key.ServerAuth()))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cred := g.joined("old")
	req, _ := http.NewRequest("POST", g.url+nodev2connect.ControlRegisterProcedure, bytes.NewReader(oldRegister("old", srv.URL, 2)))
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Authorization", "Bearer "+cred)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("register the 2.2 node: %v %v", resp, err)
	}
	r := NewRouter(Options{Store: g.st, Nodes: g.st, Key: master})
	made, err := r.Create(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc_a", MemoryMiB: 256}})
	if err != nil || made.Host != "old" {
		t.Fatalf("a create on the 2.2 node: %+v %v", made, err)
	}
	n, err := g.st.UpdateNode(ctx, "old", func(n *store.NodeRecord) error { n.Protocol = "2.1"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.client(n).CloneImage(ctx, "img_x", made.ID, nil, []*store.SandboxRecord{{}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "node protocol 2.1") || !strings.Contains(err.Error(), "needs 2.2") {
		t.Fatalf("children from the image store on a 2.1 node: %v", err)
	}
	// Nor a create from a template another node built: the 2.1 node
	// cannot fetch it from the image store.
	if err := g.st.PutTemplate(ctx, sandbox.Template{ID: "tpl_other", Name: "other", AccountID: "acc_a", Host: "gone",
		State: sandbox.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{AccountID: "acc_a", MemoryMiB: 256, Template: "tpl_other"}}); !errors.Is(err, errdefs.ErrNodeFull) || !strings.Contains(err.Error(), "protocol 2.2") {
		t.Fatalf("a create from a template held by a node that is gone, with only a 2.1 node live: %v", err)
	}
	// A sandbox stopped on a lost node is never sent to the 2.1 one.
	if _, err := g.st.UpdateSandbox(ctx, made.ID, func(rec *store.SandboxRecord) error {
		rec.State, rec.Host = sandbox.StateStopped, "gone"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(ctx, made.ID); !errors.Is(err, errdefs.ErrNodeFull) || !strings.Contains(err.Error(), "protocol 2.2") {
		t.Fatalf("a start of a sandbox whose node is gone, with only a 2.1 node live: %v", err)
	}
}
