package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	connectrpc "connectrpc.com/connect"

	"github.com/zeish/zeish/internal/e2b"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/process"
	"github.com/zeish/zeish/internal/e2b/envdpb/process/processconnect"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// e2bOnCluster uses E2B's API on the control plane: a create there, a
// command through envd on the sandbox's node directly and through the
// control plane (which forwards envd to the node), a kill there.
func (l *lab) e2bOnCluster(ctx context.Context) {
	t := l.t
	t.Helper()
	call := func(method, path string, body any, out any) int {
		t.Helper()
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, method, "http://"+l.control.Addr+e2b.Prefix+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-KEY", l.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	var made struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if st := call("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 300}, &made); st != http.StatusCreated || made.EnvdAccessToken == "" {
		t.Fatalf("e2b create through the control plane: %d %+v", st, made)
	}
	sb, err := l.client.GetSandbox(ctx, made.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	run := func(base, script string) (string, error) {
		c := processconnect.NewProcessClient(http.DefaultClient, base+e2b.Prefix+"/envd")
		req := connectrpc.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}})
		req.Header().Set("E2b-Sandbox-Id", made.SandboxID)
		req.Header().Set("X-Access-Token", made.EnvdAccessToken)
		stream, err := c.Start(ctx, req)
		if err != nil {
			return "", err
		}
		defer stream.Close()
		var out strings.Builder
		for stream.Receive() {
			if d := stream.Msg().GetEvent().GetData(); d != nil {
				out.Write(d.GetStdout())
			}
		}
		return strings.TrimSpace(out.String()), stream.Err()
	}
	// Straight to its node, as /access's URL is for zeish's data plane.
	if out, err := run("http://"+l.nodes[sb.Host].Addr, "echo e2b > /root/e; uname -n"); err != nil || out != sb.Name {
		t.Fatalf("envd on node %s: %q %v", sb.Host, out, err)
	}
	// Through the control plane, which forwards to the node.
	if out, err := run("http://"+l.control.Addr, "cat /root/e"); err != nil || out != "e2b" {
		t.Fatalf("envd through the control plane: %q %v", out, err)
	}
	// The other node does not serve it.
	for id, z := range l.nodes {
		if id != sb.Host {
			if _, err := run("http://"+z.Addr, "true"); err == nil {
				t.Fatalf("envd of %s served by node %s, it runs on %s", made.SandboxID, id, sb.Host)
			}
		}
	}
	// getMetrics on the control plane: the sandbox's node samples it (since
	// the create's first envd request) and answers through the forwarding.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var samples []struct {
			CPUCount int    `json:"cpuCount"`
			MemTotal uint64 `json:"memTotal"`
		}
		st := call("GET", "/sandboxes/"+made.SandboxID+"/metrics", nil, &samples)
		if st == http.StatusOK && len(samples) > 0 && samples[0].CPUCount > 0 && samples[0].MemTotal > 0 {
			break
		}
		if st != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("e2b getMetrics through the control plane: %d %+v", st, samples)
		}
		time.Sleep(time.Second)
	}
	if st := call("DELETE", "/sandboxes/"+made.SandboxID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("e2b kill: %d", st)
	}
	if gone, err := l.client.WaitSandbox(ctx, made.SandboxID, zeish.WaitRequest{State: sandbox.StateDestroyed, TimeoutSeconds: 60}); err != nil || gone.State != sandbox.StateDestroyed {
		t.Fatalf("after e2b kill: %+v %v", gone, err)
	}
}
