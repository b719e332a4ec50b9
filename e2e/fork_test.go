package e2e

import (
	"bytes"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// counterScript counts in the background, so a test can see a process go on.
// It renames each value into place: a reader must never see the file empty
// between the truncate and the write.
const counterScript = "echo 0 > /root/counter; sh -c 'i=0; while true; do i=$((i+1)); echo $i > /root/counter.new; mv /root/counter.new /root/counter; sleep 0.2; done' </dev/null >/dev/null 2>&1 &"

// shell runs a shell command and fails the test unless it exits 0.
func shell(t *testing.T, conn *zeish.SandboxConn, script string) string {
	t.Helper()
	out, errOut, res := run(t, conn, "sh", "-c", script)
	if res.ExitCode != 0 {
		t.Fatalf("%q in %s: exit %d, stderr %q", script, conn.ID(), res.ExitCode, errOut)
	}
	return strings.TrimSpace(out)
}

// counter reads the background counter.
func counter(t *testing.T, conn *zeish.SandboxConn) int {
	t.Helper()
	v, err := strconv.Atoi(shell(t, conn, "cat /root/counter"))
	if err != nil {
		t.Fatalf("counter in %s: %v", conn.ID(), err)
	}
	return v
}

// requireCounting checks the counter moves on from at least from.
func requireCounting(t *testing.T, conn *zeish.SandboxConn, from int) {
	t.Helper()
	a := counter(t, conn)
	time.Sleep(1200 * time.Millisecond)
	b := counter(t, conn)
	if a < from || b <= a {
		t.Fatalf("counter in %s: %d then %d, want ≥ %d and moving on", conn.ID(), a, b, from)
	}
}

func connect(t *testing.T, c *zeish.Client, id string) *zeish.SandboxConn {
	t.Helper()
	conn, err := c.Connect(ctxFor(t, time.Minute), id)
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	return conn
}

// TestFork proves the rules of docs/clone.md on real VMs: processes carry on in each
// child, memory and disk are copy-on-write and isolated, identities are new,
// fields are kept or overridden, lineage is recorded, forks of forks and of
// stopped sandboxes work, and deleting the parent leaves children working.
func TestFork(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	parent, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "fork-parent", MemoryMiB: 256,
		Env: map[string]string{"LEVEL": "parent"}, MaxCostMicros: 5_000_000_000,
		Metadata: map[string]string{"team": "evals"}}, zeish.Wait())
	if err != nil || parent.State != sandbox.StateRunning {
		t.Fatalf("create parent: %+v %v", parent, err)
	}
	pconn := connect(t, c, parent.ID)
	shell(t, pconn, counterScript+" echo prepared > /root/prepared")
	before := counter(t, pconn)

	resp, err := c.CloneSandbox(ctx, parent.ID, api.CloneRequest{Count: 2, Name: "kid", MaxCostMicros: ptr(int64(9_000_000_000))}, zeish.Wait())
	if err != nil {
		t.Fatal(err)
	}
	// A running parent is really paused for the capture: the measured
	// pause cannot be zero (0 is what a paused baseline's re-fork reports).
	if len(resp.Sandboxes) != 2 || resp.PauseMS <= 0 {
		t.Fatalf("clone response: %+v; want 2 children and the parent's pause measured", resp)
	}
	t.Logf("parent paused %d ms", resp.PauseMS)
	// /metrics counts the fork's pause and the sandboxes by state.
	if st, _, body := s.raw(t, "GET", "/metrics", "", ""); st != 200 ||
		!strings.Contains(string(body), "zeish_fork_pause_seconds_count 1") ||
		!strings.Contains(string(body), `zeish_sandboxes{state="running"} 3`) ||
		!strings.Contains(string(body), "zeish_node_memory_committed_mib") {
		t.Fatalf("GET /metrics: %d\n%s", st, body)
	}
	kids := resp.Sandboxes
	seen := map[string]bool{parent.ID: true, parent.Name: true, parent.Address: true}
	for i, k := range kids {
		switch {
		case k.State != sandbox.StateRunning:
			t.Fatalf("child %d: state %s (%s)", i, k.State, k.StateReason)
		case k.ParentID != parent.ID || k.Name != "kid-"+strconv.Itoa(i+1) || k.Hostname != k.Name:
			t.Fatalf("child %d identity: %+v", i, k)
		case seen[k.ID] || seen[k.Name] || seen[k.Address]:
			t.Fatalf("child %d reuses an id, name or address: %+v", i, k)
		case k.VCPUs != parent.VCPUs || k.MemoryMiB != parent.MemoryMiB || k.DiskMiB != parent.DiskMiB ||
			k.Region != parent.Region || k.Host != parent.Host || k.Env["LEVEL"] != "parent":
			t.Fatalf("child %d must keep size, region, host and env: %+v", i, k)
		case k.MaxCostMicros != 9_000_000_000 || k.Metadata["team"] != "evals":
			t.Fatalf("child %d: budget overridden and metadata kept? %+v", i, k)
		}
		seen[k.ID], seen[k.Name], seen[k.Address] = true, true, true
	}
	k1, k2 := connect(t, c, kids[0].ID), connect(t, c, kids[1].ID)

	t.Run("processes carry on", func(t *testing.T) {
		for _, conn := range []*zeish.SandboxConn{k1, k2, pconn} {
			requireCounting(t, conn, before)
			if got := shell(t, conn, "cat /root/prepared; echo $LEVEL"); got != "prepared\nparent" {
				t.Fatalf("%s: prepared state and env: %q", conn.ID(), got)
			}
		}
	})

	t.Run("idle children stay cheap", func(t *testing.T) { requireIdleFriendly(t, s, k1, accelOf(t, s)) })

	t.Run("new identity, clock and RNG", func(t *testing.T) {
		if got := shell(t, k1, "hostname"); got != "kid-1" {
			t.Fatalf("hostname %q", got)
		}
		if got := shell(t, k1, "ip addr show eth0"); !strings.Contains(got, kids[0].Address+"/") {
			t.Fatalf("child address %s not on eth0:\n%s", kids[0].Address, got)
		}
		r1 := shell(t, k1, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
		r2 := shell(t, k2, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
		if len(r1) != 64 || r1 == r2 {
			t.Fatalf("children read the same random bytes: %s %s", r1, r2)
		}
		secs, _ := strconv.ParseInt(shell(t, k2, "date +%s"), 10, 64)
		if d := time.Since(time.Unix(secs, 0)); d < -10*time.Second || d > 10*time.Second {
			t.Fatalf("child clock is %s off", d)
		}
	})

	t.Run("disk copy-on-write and rm -rf", func(t *testing.T) {
		shell(t, k1, "echo mine > /root/k1-only")
		for _, conn := range []*zeish.SandboxConn{k2, pconn} {
			if _, _, res := run(t, conn, "test", "-e", "/root/k1-only"); res.ExitCode == 0 {
				t.Fatalf("%s sees a file child 1 wrote", conn.ID())
			}
		}
		var out bytes.Buffer
		res, err := k1.Exec(ctx, api.ExecRequest{Argv: []string{"/bin/busybox", "rm", "-rf", "/bin", "/sbin", "/usr", "/etc", "/root", "/lib"}}, &out, &out)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("rm -rf in child 1: exit %d, %v: %s", res.ExitCode, err, out.String())
		}
		// The wipe really happened in child 1: nothing is left to run.
		var gone bytes.Buffer
		if res, err := k1.Exec(ctx, api.ExecRequest{Argv: []string{"/bin/sh", "-c", "true"}}, &gone, &gone); err == nil && res.ExitCode == 0 {
			t.Fatal("child 1 still runs /bin/sh after rm -rf /bin")
		}
		if _, _, res := run(t, k2, "ls", "/bin/sh", "/etc/passwd", "/root/prepared"); res.ExitCode != 0 {
			t.Fatal("a sibling lost files when child 1 wiped its disk")
		}
		if _, _, res := run(t, pconn, "ls", "/bin/sh", "/etc/passwd", "/root/prepared"); res.ExitCode != 0 {
			t.Fatal("the parent lost files when child 1 wiped its disk")
		}
	})

	t.Run("lineage", func(t *testing.T) {
		l, err := c.Lineage(ctx, kids[0].ID)
		if err != nil || len(l.Ancestors) != 1 || l.Ancestors[0].ID != parent.ID {
			t.Fatalf("child lineage: %+v %v", l, err)
		}
		l, err = c.Lineage(ctx, parent.ID)
		if err != nil || len(l.Descendants) != 2 || len(l.Ancestors) != 0 {
			t.Fatalf("parent lineage: %+v %v", l, err)
		}
	})

	var grand sandbox.Sandbox
	t.Run("fork of a fork", func(t *testing.T) {
		resp, err := c.CloneSandbox(ctx, kids[1].ID, api.CloneRequest{Name: "grandkid"}, zeish.Wait())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("clone a child: %+v %v", resp, err)
		}
		t.Logf("child paused %d ms (promotion included)", resp.PauseMS)
		grand = resp.Sandboxes[0]
		g := connect(t, c, grand.ID)
		requireCounting(t, g, before)
		requireCounting(t, k2, before)
		l, err := c.Lineage(ctx, grand.ID)
		if err != nil || len(l.Ancestors) != 2 || l.Ancestors[0].ID != kids[1].ID || l.Ancestors[1].ID != parent.ID {
			t.Fatalf("grandchild lineage: %+v %v", l, err)
		}
	})

	t.Run("re-forking a paused baseline reuses its image", func(t *testing.T) {
		if _, err := c.PauseSandbox(ctx, grand.ID); err != nil {
			t.Fatal(err)
		}
		first, err := c.CloneSandbox(ctx, grand.ID, api.CloneRequest{}, zeish.Wait())
		if err != nil || len(first.Sandboxes) != 1 {
			t.Fatalf("fork a paused sandbox: %+v %v", first, err)
		}
		again, err := c.CloneSandbox(ctx, grand.ID, api.CloneRequest{}, zeish.Wait())
		if err != nil || len(again.Sandboxes) != 1 || again.PauseMS != 0 {
			t.Fatalf("fork the same paused sandbox again: %+v %v; want no pause at all", again, err)
		}
		t.Logf("paused baseline: first fork %d ms (promotion included), again %d ms", first.PauseMS, again.PauseMS)
		for _, sb := range []sandbox.Sandbox{first.Sandboxes[0], again.Sandboxes[0]} {
			requireCounting(t, connect(t, c, sb.ID), before)
			c.DeleteSandbox(ctx, sb.ID, zeish.Wait())
		}
		if got, _ := c.GetSandbox(ctx, grand.ID); got.State != sandbox.StatePaused {
			t.Fatalf("the baseline must stay paused: %s", got.State)
		}
		if _, err := c.ResumeSandbox(ctx, grand.ID); err != nil {
			t.Fatal(err)
		}
		requireCounting(t, connect(t, c, grand.ID), before)
	})

	t.Run("deleting the parent leaves its forks", func(t *testing.T) {
		if _, err := c.DeleteSandbox(ctx, parent.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		requireCounting(t, k2, before)
		requireCounting(t, connect(t, c, grand.ID), before)
	})

	t.Run("stop, fork the stopped sandbox, start", func(t *testing.T) {
		stopped, err := c.StopSandbox(ctx, kids[1].ID, zeish.Wait())
		if err != nil || stopped.State != sandbox.StateStopped {
			t.Fatalf("stop: %+v %v", stopped, err)
		}
		if p := s.pidsOf(kids[1].ID); len(p) != 0 {
			t.Fatalf("a stopped sandbox still has VM processes %v", p)
		}
		resp, err := c.CloneSandbox(ctx, kids[1].ID, api.CloneRequest{}, zeish.Wait())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("clone a stopped sandbox: %+v %v", resp, err)
		}
		requireCounting(t, connect(t, c, resp.Sandboxes[0].ID), before)
		got, err := c.GetSandbox(ctx, kids[1].ID)
		if err != nil || got.State != sandbox.StateStopped {
			t.Fatalf("the stopped parent must stay stopped: %+v %v", got, err)
		}
		started, err := c.StartSandbox(ctx, kids[1].ID, zeish.Wait())
		if err != nil || started.State != sandbox.StateRunning {
			t.Fatalf("start: %+v %v", started, err)
		}
		requireCounting(t, connect(t, c, kids[1].ID), before)
	})

	t.Run("zeishd restart keeps forks and their images", func(t *testing.T) {
		s.stop()
		s.start()
		for _, id := range []string{kids[1].ID, grand.ID} {
			got, err := c.WaitSandbox(ctx, id, api.WaitRequest{State: sandbox.StateRunning, TimeoutSeconds: 120})
			if err != nil || got.State != sandbox.StateRunning {
				t.Fatalf("%s after restart: %+v %v", id, got, err)
			}
			requireCounting(t, connect(t, c, id), before)
		}
		resp, err := c.CloneSandbox(ctx, grand.ID, api.CloneRequest{}, zeish.Wait())
		if err != nil || len(resp.Sandboxes) != 1 || resp.Sandboxes[0].State != sandbox.StateRunning {
			t.Fatalf("fork after restart: %+v %v", resp, err)
		}
		requireCounting(t, connect(t, c, resp.Sandboxes[0].ID), before)
	})

	t.Run("bad clone requests", func(t *testing.T) {
		for _, body := range []string{`{"count":0,"colour":1}`, `{"count":-1}`, `{"count":99}`, `{"name":"Bad Name"}`, `{"size":"large"}`, `{"max_cost_micros":-3}`} {
			var e api.ErrorBody
			if st := s.do(t, "POST", api.BasePath+"/public/sandboxes/"+kids[1].ID+"/clone", s.key, body, &e); st != 400 || e.Error.Code != "invalid_argument" {
				t.Errorf("clone %s: %d %+v, want 400 invalid_argument", body, st, e)
			}
		}
		if _, err := c.CloneSandbox(ctx, kids[1].ID, api.CloneRequest{Name: "kid-1"}); !errors.Is(err, errdefs.ErrNameTaken) {
			t.Errorf("clone to a taken name: %v, want name_taken", err)
		}
		if _, err := c.CloneSandbox(ctx, parent.ID, api.CloneRequest{}); !errors.Is(err, errdefs.ErrInvalidState) {
			t.Errorf("clone of a destroyed sandbox: %v, want invalid_state", err)
		}
	})
}

// TestNodeFull checks a fork beyond the host's memory budget is refused
// with node_full and changes nothing.
func TestNodeFull(t *testing.T) {
	s := startServer(t, "ZEISH_MEMORY_BUDGET_MIB=600")
	ctx := ctxFor(t, 5*time.Minute)
	sb, err := s.client.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	_, err = s.client.CloneSandbox(ctx, sb.ID, api.CloneRequest{Count: 2})
	if !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("clone of 2 × 256 MiB with 344 MiB free: %v, want node_full", err)
	}
	if list, _ := s.client.ListSandboxes(ctx, zeish.ListOptions{}); len(list) != 1 {
		t.Fatalf("a refused fork left sandboxes: %d", len(list))
	}
	if _, err := s.client.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 512}); !errors.Is(err, errdefs.ErrNodeFull) {
		t.Fatalf("create beyond the budget: %v, want node_full", err)
	}
}

func ptr[T any](v T) *T { return &v }

// pidsOf lists VM processes of one sandbox.
func (s *server) pidsOf(id string) []int {
	return procscan.Under(filepath.Join(s.dataDir, "sandboxes", id))
}
