package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/testenv"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestClusterJoinTLS runs a control plane and a node agent that talk TLS
// only (certificates of a CA made for the test, no ZEISH_CLUSTER_ALLOW_HTTP),
// the node joined with a join token made by `zeishd join-token`: the data
// plane is the node's over https, a sandbox's secrets reach its guest at
// create, after a stop and start and in a fork child though the node holds
// no secrets key, the spent join token admits no second node, and a node
// URL of plain http is refused. One VM (booted once, stopped, started,
// forked).
func TestClusterJoinTLS(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	testenv.RequireQEMU(t)
	buildBinaries(t)
	zeishd := filepath.Join(bin, "zeishd")
	db := postgresServer(t).NewDatabase(t)
	dir := t.TempDir()
	ca, err := testenv.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	tlsEnv := func(name string) []string {
		cert, key, err := ca.Issue(dir, name, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return []string{"ZEISH_TLS_CERT=" + cert, "ZEISH_TLS_KEY=" + key, "ZEISH_CLUSTER_CA=" + ca.File}
	}
	control := &testenv.Zeishd{Bin: zeishd, DataDir: tempDir(t, "zeish-e2e-tls-control-"), TLS: ca.ClientTLS(),
		Env: append(tlsEnv("control"), "ZEISH_ROLE=control", "ZEISH_DATABASE_URL="+db, "ZEISH_NODE_LOST_AFTER=6s", "ZEISH_LOG_LEVEL=debug")}
	if err := control.Start(ctx); err != nil {
		t.Fatal(err)
	}
	token, err := testenv.JoinToken(ctx, zeishd, db, "tls-node")
	if err != nil {
		t.Fatal(err)
	}
	tpl := testenv.BaseTemplate(t)
	nodeEnv := append(tlsEnv("node"), "ZEISH_ROLE=node", "ZEISH_NODE_ID=tls-node", "ZEISH_CONTROL_URL="+control.URL(),
		"ZEISH_JOIN_TOKEN="+token, "ZEISH_MEMORY_BUDGET_MIB=1024",
		"ZEISH_SANDBOXD="+testenv.SandboxdBinary(t), "ZEISH_TEMPLATE_CACHE="+filepath.Dir(tpl.Dir), "ZEISH_LOG_LEVEL=debug")
	node := &testenv.Zeishd{Bin: zeishd, DataDir: tempDir(t, "zeish-e2e-tls-node-"), TLS: ca.ClientTLS(), Env: nodeEnv}
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	key, err := control.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS()}}
	client := zeish.NewClient(control.URL()+api.BasePath, key, zeish.WithHTTPClient(hc))
	var made []zeish.Sandbox
	t.Cleanup(func() {
		for _, sb := range made {
			client.DeleteSandbox(context.Background(), sb.ID, zeish.Wait())
		}
		for _, z := range []*testenv.Zeishd{node, control} {
			if t.Failed() {
				t.Logf("log:\n%s", z.Log.Tail(6000))
			}
			z.Stop()
			os.RemoveAll(z.DataDir)
		}
	})
	waitLive(ctx, t, hc, control.URL(), key, "tls-node")

	// The node holds its own credential and no key of the control plane's.
	if _, err := os.Stat(filepath.Join(node.DataDir, "node.credential")); err != nil {
		t.Fatalf("the node's credential: %v", err)
	}
	for _, f := range []string{"secrets.key", "token.key"} {
		if _, err := os.Stat(filepath.Join(node.DataDir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the node's data dir holds %s: %v", f, err)
		}
	}

	started := time.Now()
	sb, err := client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "tls", MemoryMiB: 256,
		Secrets: map[string]string{"TOKEN": "s3cret-value"}}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	made = append(made, sb)
	secretIn := func(id string) string {
		t.Helper()
		acc, err := client.Access(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(acc.URL, node.URL()+api.DataPath) {
			t.Fatalf("data plane of %s at %s, want the node's https URL %s", id, acc.URL, node.URL())
		}
		conn, err := client.Connect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return shell(t, conn, "echo $TOKEN")
	}
	if got := secretIn(sb.ID); got != "s3cret-value" {
		t.Fatalf("the secret in the guest after create: %q", got)
	}
	if _, err := client.StopSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StartSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	if got := secretIn(sb.ID); got != "s3cret-value" {
		t.Fatalf("the secret in the guest after stop and start: %q", got)
	}
	fork, err := client.CloneSandbox(ctx, sb.ID, zeish.CloneRequest{Name: "tls-kid"}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	made = append(made, fork.Sandboxes...)
	if got := secretIn(fork.Sandboxes[0].ID); got != "s3cret-value" {
		t.Fatalf("the secret in a fork child: %q", got)
	}
	t.Logf("create, exec, stop, start and fork over TLS: %v", time.Since(started).Round(100*time.Millisecond))

	// The spent token admits nobody else; a plain-http node URL is refused.
	for _, c := range []struct {
		name, want string
		env        []string
	}{
		{"second node with the spent token", "was used by node tls-node",
			[]string{"ZEISH_NODE_ID=tls-node-2"}},
		{"node URL over plain http", "plain http",
			[]string{"ZEISH_NODE_ID=tls-node-3", "ZEISH_NODE_URL=http://127.0.0.1:1"}},
	} {
		z := &testenv.Zeishd{Bin: zeishd, DataDir: t.TempDir(), TLS: ca.ClientTLS(), Env: append(append([]string{}, nodeEnv...), c.env...)}
		if err := z.Start(ctx); err == nil || !strings.Contains(z.Log.Tail(4000), c.want) {
			z.Stop()
			t.Fatalf("%s: started (%v); log:\n%s", c.name, err, z.Log.Tail(4000))
		}
	}
}

// waitLive waits until the control plane at base lists node id live and
// healthy.
func waitLive(ctx context.Context, t *testing.T, hc *http.Client, base, key, id string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var list api.NodeList
		req, _ := http.NewRequestWithContext(ctx, "GET", base+api.BasePath+"/admin/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
		}
		for _, n := range list.Nodes {
			if n.ID == id && n.Live && n.Healthy {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s never became live: %+v %v", id, list.Nodes, err)
		}
	}
}
