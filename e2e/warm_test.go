package e2e

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestWarmTemplate builds a template whose start command starts a counter
// and whose ready command waits for it: the build saves the machine, and a
// sandbox created from the template resumes it, with the counter already
// running (the token it drew at start is the build's), while each sandbox
// is its own machine (hostname, entropy, files, its counter running on).
// The template is warm at the size its build asked for (1 GiB); a
// create of another size boots cold; a cold template saves nothing; a
// ready command that never succeeds fails the build with the reason.
func TestWarmTemplate(t *testing.T) {
	s := startServer(t)
	c := s.client
	ctx := ctxFor(t, 15*time.Minute)
	l, _ := ociimg.Standard(t).Layers()
	img := ociimg.Image(t, v1.Config{Env: []string{"PATH=/bin"}},
		append(l, ociimg.Layer(t, ociimg.Entry{Name: "salt", Body: sandbox.NewID("run_")}))...)
	archive := "docker-archive:" + ociimg.WriteDockerArchive(t, img, t.TempDir())

	const counter = `cat /proc/sys/kernel/random/uuid > /tmp/token; i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done`
	build := func(req zeish.BuildTemplateRequest) zeish.Template {
		t.Helper()
		tpl, err := c.BuildTemplateFrom(ctx, req, archive)
		if err != nil {
			t.Fatal(err)
		}
		if tpl, err = c.WaitTemplate(ctx, tpl.ID, nil); err != nil {
			t.Fatal(err)
		}
		return tpl
	}
	// Warm at 1 GiB, not the default size: its sandboxes of 1 GiB resume.
	tpl := build(zeish.BuildTemplateRequest{Name: "warm", DiskMiB: 256, MemoryMiB: 1024,
		StartCmd: []string{"/bin/sh", "-c", counter},
		ReadyCmd: []string{"/bin/sh", "-c", `test -s /tmp/count && [ "$(cat /tmp/count)" -ge 3 ]`}})
	if tpl.State != sandbox.TemplateReady || tpl.Warm == nil {
		t.Fatalf("warm template: %+v (%s)", tpl, tpl.StateReason)
	}
	var log []string
	if err := c.TemplateEvents(ctx, tpl.ID, func(e zeish.TemplateEvent) error { log = append(log, e.Message); return nil }); err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(log, "\n"); !strings.Contains(all, "warm: waiting for") || !strings.Contains(all, "warm: saved") {
		t.Errorf("build log does not show the warm steps:\n%s", all)
	}

	// Two sandboxes of the warm size: both resume the saved machine.
	size := tpl.Warm
	if size.MemoryMiB != 1024 || tpl.MemoryMiB != 1024 {
		t.Errorf("warm machine %+v of a template built with memory_mib 1024 (template: %d)", size, tpl.MemoryMiB)
	}
	// A ready VM (launched from the warm image, agent connected, warmed
	// with an exec) waits for the first create; the second, right after,
	// finds none and starts from the image itself.
	s.waitReadyVM(t)
	var conns []*zeish.SandboxConn
	var ids []string
	for _, name := range []string{"warm-a", "warm-b"} {
		began := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name, Template: "warm", VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB}, zeish.Wait())
		if err != nil || sb.State != sandbox.StateRunning {
			t.Fatalf("create %s: %+v %v", name, sb, err)
		}
		conn, err := c.Connect(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		shell(t, conn, "true")
		t.Logf("warm create → first exec: %v", time.Since(began).Round(time.Millisecond))
		conns, ids = append(conns, conn), append(ids, sb.ID)
	}
	if hits := s.metric(t, "zeish_node_warm_creates_total", `ready="hit"`); hits < 1 {
		t.Errorf("warm creates that adopted a ready VM: %v, want at least 1", hits)
	}
	token := shell(t, conns[0], "cat /tmp/token")
	if got := shell(t, conns[1], "cat /tmp/token"); got != token || token == "" {
		t.Errorf("tokens drawn by the start command: %q and %q; both sandboxes should carry the build's", token, got)
	}
	for i, conn := range conns {
		if got := shell(t, conn, "cat /proc/sys/kernel/hostname"); got != []string{"warm-a", "warm-b"}[i] {
			t.Errorf("hostname %d: %q", i, got)
		}
		first := atoi(t, shell(t, conn, "cat /tmp/count"))
		if first < 3 {
			t.Errorf("sandbox %d: counter at %d, below what the ready command saw", i, first)
		}
		// The counter runs on in each sandbox (its process came with the machine).
		if !waitFor(30*time.Second, func() bool { return atoi(t, shell(t, conn, "cat /tmp/count")) > first }) {
			t.Errorf("sandbox %d: counter stuck at %d", i, first)
		}
		if out := shell(t, conn, "ps 2>/dev/null || ls /proc | grep -c '^[0-9]'"); out == "" {
			t.Errorf("no processes listed")
		}
	}
	if a, b := shell(t, conns[0], "cat /proc/sys/kernel/random/uuid"), shell(t, conns[1], "cat /proc/sys/kernel/random/uuid"); a == b {
		t.Errorf("both sandboxes drew the same uuid %s: entropy not reseeded", a)
	}
	shell(t, conns[0], "echo mine > /tmp/mark")
	if out, _, res := run(t, conns[1], "cat", "/tmp/mark"); res.ExitCode == 0 {
		t.Errorf("a file written in one sandbox shows in the other: %q", out)
	}

	// kill -9 of zeishd: the sandbox that adopted a ready VM runs on (its
	// VMM still names the placeholder it was launched for, and recovery
	// must not take it for an orphan); the dead zeishd's ready VM is swept.
	s.remember()
	s.zeishd.Kill()
	s.start()
	for i, id := range ids {
		sb, err := c.WaitSandbox(ctx, id, zeish.WaitRequest{State: sandbox.StateRunning, TimeoutSeconds: 60})
		if err != nil || sb.State != sandbox.StateRunning {
			t.Fatalf("sandbox %d after kill -9 and restart: %+v %v", i, sb, err)
		}
		conn, err := c.Connect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = conn
		before := atoi(t, shell(t, conn, "cat /tmp/count"))
		if !waitFor(30*time.Second, func() bool { return atoi(t, shell(t, conn, "cat /tmp/count")) > before }) {
			t.Errorf("sandbox %d: counter stuck at %d after the restart", i, before)
		}
	}
	if got := len(procscan.Under(s.dataDir)); got != len(ids) {
		t.Errorf("%d VMMs run after the restart, want the %d sandboxes' (the dead zeishd's ready VM swept)", got, len(ids))
	}

	// Another size boots cold: the start command runs at its own boot.
	began := time.Now()
	cold, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "warm", MemoryMiB: 256, DiskMiB: size.DiskMiB}, zeish.Wait())
	if err != nil || cold.State != sandbox.StateRunning {
		t.Fatalf("create of another size: %+v %v", cold, err)
	}
	coldConn, err := c.Connect(ctx, cold.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := shell(t, coldConn, "i=0; while [ ! -s /tmp/token ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; cat /tmp/token")
	t.Logf("cold create → first exec: %v", time.Since(began).Round(time.Millisecond))
	if got == token || got == "" {
		t.Errorf("a sandbox of another size has token %q (the warm one is %q): it should have booted cold", got, token)
	}
	for _, id := range append(ids, cold.ID) {
		if _, err := c.DeleteSandbox(ctx, id, zeish.Wait()); err != nil {
			t.Fatal(err)
		}
	}

	// A cold template saves no machine.
	if coldTpl := build(zeish.BuildTemplateRequest{Name: "warm-cold", DiskMiB: 256, Cold: true}); coldTpl.State != sandbox.TemplateReady || coldTpl.Warm != nil {
		t.Errorf("cold template: %+v", coldTpl)
	}
	// A ready command that never succeeds fails the build, saying so.
	bad := build(zeish.BuildTemplateRequest{Name: "never-ready", DiskMiB: 256, ReadyCmd: []string{"/bin/sh", "-c", "echo not yet; exit 1"}, ReadyTimeoutSeconds: 2})
	if bad.State != sandbox.TemplateError || !strings.Contains(bad.StateReason, "ready command") || !strings.Contains(bad.StateReason, "not yet") {
		t.Errorf("never-ready template: %s %q", bad.State, bad.StateReason)
	}
	if _, err := c.BuildTemplate(ctx, zeish.BuildTemplateRequest{Name: "x", From: "registry:127.0.0.1:1/a:b", ReadyTimeoutSeconds: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative ready timeout: %v", err)
	}
	// The warm image goes with the template once no sandbox uses it.
	for _, name := range []string{"warm", "warm-cold", "never-ready"} {
		if _, err := c.DeleteTemplate(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(time.Minute, func() bool { return len(s.images()) == 0 }) {
		t.Errorf("images left after the template and its sandboxes were deleted: %v", s.images())
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// waitFor polls cond every 100 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// waitReadyVM waits until zeishd keeps a ready VM (of a warm template
// built just before); else it fails with what zeishd's log says of them.
func (s *server) waitReadyVM(t *testing.T) {
	t.Helper()
	if waitFor(2*time.Minute, func() bool { return s.metric(t, "zeish_node_ready_vms", "") >= 1 }) {
		return
	}
	var lines []string
	for _, l := range strings.Split(s.logText(), "\n") {
		if strings.Contains(l, "ready") || strings.Contains(l, "warm") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	t.Fatalf("no ready VM for the warm template; zeishd's log says:\n%s", strings.Join(lines, "\n"))
}
