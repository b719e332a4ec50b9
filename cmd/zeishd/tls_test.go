package main

import (
	"context"
	"github.com/zeish/zeish/internal/config"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/internal/cluster"
	"github.com/zeish/zeish/internal/nodeapi"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/testenv"
)

// A node joins and registers over TLS with a certificate of the cluster's
// own CA (a self-made one here): the control plane serves HTTPS, the node
// checks it against ZEISH_CLUSTER_CA and speaks HTTP/2 to it; a client
// that does not trust the CA gets nowhere, and plain http:// URLs are
// refused unless allowed.
func TestJoinAndRegisterOverTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	ca, err := testenv.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(dir, "control", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cfg := &config.Config{TLSCert: cert, TLSKey: key, ClusterCA: ca.File, DataDir: dataDir, MaxConnections: 16}
	hosts, err := loadHostTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.SQLite(t)
	reg := &cluster.Registry{Nodes: st, Key: []byte("the control plane's key, 32 bytes"), Every: time.Second}
	protos := map[int]int{}
	mux := http.NewServeMux()
	path, h := reg.Handler()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos[r.ProtoMajor]++
		h.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go serve(ctx, slog.Default(), cfg, ln, mux, hosts)
	base := "https://" + ln.Addr().String()

	rec, token, err := cluster.NewJoinToken("n1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateJoinToken(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// A client that does not trust the cluster's CA.
	stranger := newControls([]string{base}, (hostTLS{}).rpcClient())
	if _, err := stranger.Join(ctx, connect.NewRequest(&nodev2.JoinRequest{JoinToken: token, NodeId: "n1"})); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the CA: %v", err)
	}
	ctl := newControls([]string{base}, hosts.rpcClient())
	cfg.JoinToken = token
	regReq := &nodev2.RegisterRequest{Version: nodeapi.Ours(), NodeId: "n1", Url: "https://127.0.0.1:7421", Region: "eu"}
	rep, err := joinAndRegister(ctx, slog.Default(), cfg, ctl, regReq)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CallKey != cluster.CallKey(reg.Key, "n1") {
		t.Fatalf("register reply: %+v", rep)
	}
	if protos[2] == 0 || protos[1] != 0 {
		t.Fatalf("calls by HTTP version: %v, want HTTP/2 only", protos)
	}
	// The credential is kept, 0600, and a restart registers with it: the
	// spent token is not needed again.
	fi, err := os.Stat(filepath.Join(dataDir, credentialFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v %v", fi, err)
	}
	cfg.JoinToken = ""
	if _, err := joinAndRegister(ctx, slog.Default(), cfg, newControls([]string{base}, hosts.rpcClient()), regReq); err != nil {
		t.Fatalf("register again with the kept credential: %v", err)
	}
	// Plain http between hosts is refused unless allowed.
	if err := hosts.checkPeer("ZEISH_CONTROL_URL", "http://cp:7420"); err == nil {
		t.Fatal("an http:// control URL was accepted")
	}
	if err := (hostTLS{allowHTTP: true}).checkPeer("ZEISH_CONTROL_URL", "http://cp:7420"); err != nil {
		t.Fatalf("http:// with ZEISH_CLUSTER_ALLOW_HTTP=on: %v", err)
	}
	regReq.Url = "http://127.0.0.1:7421"
	cred, _ := os.ReadFile(filepath.Join(dataDir, credentialFile))
	again := newControls([]string{base}, hosts.rpcClient())
	again.setCredential(strings.TrimSpace(string(cred)))
	if _, err := again.Register(ctx, connect.NewRequest(regReq)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("an http:// node URL without ZEISH_CLUSTER_ALLOW_HTTP: %v", err)
	}
}
