package e2e

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestSnapshotsAndLifecycle proves the rules of docs/snapshots.md and the lifecycle of docs/sandboxes.md on one
// real VM: pause/resume, name rules and limits, restore in place of a
// running and of a stopped sandbox (later work lost, processes back),
// secrets delivered again, and deleting a sandbox deletes its snapshots.
func TestSnapshotsAndLifecycle(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "snappy", MemoryMiB: 256,
		Secrets: map[string]string{"API_TOKEN": "s3cret-value"}}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	conn := connect(t, c, sb.ID)
	shell(t, conn, counterScript+" echo v1 > /root/state")
	before := counter(t, conn)

	t.Run("pause and resume", func(t *testing.T) {
		p, err := c.PauseSandbox(ctx, sb.ID)
		if err != nil || p.State != sandbox.StatePaused {
			t.Fatalf("pause: %+v %v", p, err)
		}
		if _, err := c.Access(ctx, sb.ID, time.Minute); !errors.Is(err, errdefs.ErrInvalidState) {
			t.Fatalf("access while paused: %v, want invalid_state", err)
		}
		if _, err := c.PauseSandbox(ctx, sb.ID); !errors.Is(err, errdefs.ErrInvalidState) {
			t.Fatalf("pause twice: %v, want invalid_state", err)
		}
		r, err := c.ResumeSandbox(ctx, sb.ID)
		if err != nil || r.State != sandbox.StateRunning {
			t.Fatalf("resume: %+v %v", r, err)
		}
		conn = connect(t, c, sb.ID)
		requireCounting(t, conn, before)
	})

	var first sandbox.Snapshot
	t.Run("create and name rules", func(t *testing.T) {
		first, err = c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "first"})
		if err != nil || first.Name != "first" || !first.IncludeRAM || first.SandboxID != sb.ID || first.SizeBytes <= 0 ||
			sandbox.CheckID(sandbox.PrefixSnapshot, first.ID) != nil {
			t.Fatalf("snapshot: %+v %v", first, err)
		}
		def, err := c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{})
		if err != nil || !regexp.MustCompile(`^snapshot-\d{8}-\d{6}$`).MatchString(def.Name) {
			t.Fatalf("default name: %+v %v", def, err)
		}
		cases := []struct {
			body, code string
			status     int
		}{
			{`{"name":"first"}`, "name_taken", 409},
			{`{"include_ram":false}`, "invalid_argument", 400},
			{`{"name":""}`, "", 201}, // empty means the default name
			{`{"name":"` + strings.Repeat("x", 65) + `"}`, "invalid_argument", 400},
			{`{"name":"tab\there"}`, "invalid_argument", 400},
			{`{"name":"ok","colour":1}`, "invalid_argument", 400},
		}
		for _, tc := range cases {
			var e api.ErrorBody
			st := s.do(t, "POST", api.BasePath+"/public/sandboxes/"+sb.ID+"/snapshots", s.key, tc.body, &e)
			if st != tc.status || e.Error.Code != tc.code {
				t.Errorf("snapshot %s: %d %+v, want %d %s", tc.body, st, e.Error, tc.status, tc.code)
			}
		}
		requireCounting(t, conn, before) // the sandbox carried on through every capture
	})

	t.Run("restore a running sandbox", func(t *testing.T) {
		shell(t, conn, "echo v2 > /root/state; echo later > /root/later")
		res, err := c.RestoreSnapshot(ctx, first.ID, zeish.Wait())
		if err != nil || res.Snapshot.ID != first.ID || res.Sandbox.ID != sb.ID || res.Sandbox.State != sandbox.StateRunning {
			t.Fatalf("restore: %+v %v", res, err)
		}
		conn = connect(t, c, sb.ID)
		if got := shell(t, conn, "cat /root/state; test -e /root/later && echo later-survived; echo $API_TOKEN"); got != "v1\ns3cret-value" {
			t.Fatalf("after restore: %q, want v1, later work lost, the secret delivered again", got)
		}
		requireCounting(t, conn, before)
		if got, _ := c.GetSnapshot(ctx, first.ID); got.ID != first.ID {
			t.Fatal("restore must keep the snapshot")
		}
	})

	t.Run("stop, restore while stopped, start", func(t *testing.T) {
		shell(t, conn, "echo v3 > /root/state")
		st, err := c.StopSandbox(ctx, sb.ID, zeish.Wait())
		if err != nil || st.State != sandbox.StateStopped {
			t.Fatalf("stop: %+v %v", st, err)
		}
		if p := s.pidsOf(sb.ID); len(p) != 0 {
			t.Fatalf("a stopped sandbox runs VM processes %v", p)
		}
		res, err := c.RestoreSnapshot(ctx, first.ID, zeish.Wait())
		if err != nil || res.Sandbox.State != sandbox.StateStopped {
			t.Fatalf("restore while stopped: %+v %v; it must stay stopped", res, err)
		}
		started, err := c.StartSandbox(ctx, sb.ID, zeish.Wait())
		if err != nil || started.State != sandbox.StateRunning {
			t.Fatalf("start: %+v %v", started, err)
		}
		conn = connect(t, c, sb.ID)
		if got := shell(t, conn, "cat /root/state"); got != "v1" {
			t.Fatalf("start after a stopped restore: state %q, want v1", got)
		}
		requireCounting(t, conn, before)
		if _, err := c.StartSandbox(ctx, sb.ID); !errors.Is(err, errdefs.ErrInvalidState) {
			t.Fatalf("start a running sandbox: %v, want invalid_state", err)
		}
	})

	t.Run("stop and start keep a running process", func(t *testing.T) {
		shell(t, conn, "echo v4 > /root/state")
		n := counter(t, conn)
		if _, err := c.StopSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StartSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		conn = connect(t, c, sb.ID)
		requireCounting(t, conn, n)
		if got := shell(t, conn, "cat /root/state"); got != "v4" {
			t.Fatalf("state after stop/start: %q", got)
		}
	})

	t.Run("limit of 20", func(t *testing.T) {
		list, err := c.ListSnapshots(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(list); i < sandbox.MaxSnapshots; i++ {
			if _, err := c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: fmt.Sprintf("n%d", i)}); err != nil {
				t.Fatalf("snapshot %d: %v", i, err)
			}
		}
		if _, err := c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "one-too-many"}); !errors.Is(err, errdefs.ErrLimitReached) {
			t.Fatalf("21st snapshot: %v, want limit_reached", err)
		}
		if err := c.DeleteSnapshot(ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetSnapshot(ctx, first.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("deleted snapshot: %v, want not_found", err)
		}
		if _, err := c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{Name: "one-too-many"}); err != nil {
			t.Fatalf("after deleting one: %v", err)
		}
		requireCounting(t, conn, before)
	})

	t.Run("no sandbox from a snapshot", func(t *testing.T) {
		before, err := c.ListSandboxes(ctx, zeish.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorBody
		if st := s.do(t, "POST", api.BasePath+"/public/sandboxes", s.key, `{"snapshot_id":"`+first.ID+`"}`, &e); st != 400 ||
			e.Error.Code != "invalid_argument" || !strings.Contains(e.Error.Message, "snapshot_id") {
			t.Fatalf("create from a snapshot: %d %+v, want 400 invalid_argument naming snapshot_id", st, e)
		}
		after, err := c.ListSandboxes(ctx, zeish.ListOptions{})
		if err != nil || len(after) != len(before) {
			t.Fatalf("a refused create from a snapshot changed the sandboxes: %d → %d (%v)", len(before), len(after), err)
		}
	})

	t.Run("delete removes snapshots and images", func(t *testing.T) {
		list, err := c.ListSnapshots(ctx, sb.ID)
		if err != nil || len(list) != sandbox.MaxSnapshots {
			t.Fatalf("snapshots before the delete: %d, %v; want %d", len(list), err, sandbox.MaxSnapshots)
		}
		if _, err := c.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
		for _, snap := range list {
			if _, err := c.GetSnapshot(ctx, snap.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("snapshot %s after deleting its sandbox: %v", snap.ID, err)
			}
		}
		if left := s.images(); len(left) != 0 {
			t.Fatalf("images left after deleting the only sandbox: %v", left)
		}
	})
}
