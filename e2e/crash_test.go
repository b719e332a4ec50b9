package e2e

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// crashRounds is how many kill -9 rounds TestCrashRecovery runs: a few in
// the suite, more with -crash.rounds (make crash).
var crashRounds = flag.Int("crash.rounds", 3, "kill -9 rounds in TestCrashRecovery")

// TestCrashRecovery kills zeishd with SIGKILL at a random moment inside an
// operation (create, fork, snapshot, stop, start, restore, delete), restarts
// it, and checks after every round: every sandbox settles running, paused,
// stopped, destroyed or error with a reason; a running one answers and
// still has its data; no VM process runs for a sandbox that is not live;
// at the end, with everything deleted, nothing is left (the harness checks
// processes, images and RAM files). Then kill -9 of one sandbox's QEMU
// leaves that sandbox error vm_exited and the other running.
func TestCrashRecovery(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, time.Duration(*crashRounds+4)*5*time.Minute)
	c := s.client
	base, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "crash-base", MemoryMiB: 256}, zeish.Wait())
	if err != nil || base.State != sandbox.StateRunning {
		t.Fatalf("create base: %+v %v", base, err)
	}
	shell(t, connect(t, c, base.ID), "echo keep > /root/data; sync")
	snap, err := c.CreateSnapshot(ctx, base.ID, api.CreateSnapshotRequest{Name: "before"})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	// ops start one operation each on base (or a sandbox of its own) and
	// return at once or when it ends; the kill lands whenever it lands.
	ops := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"create", func(ctx context.Context) error {
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 256}, zeish.Wait())
			return err
		}},
		{"fork", func(ctx context.Context) error {
			_, err := c.CloneSandbox(ctx, base.ID, api.CloneRequest{}, zeish.Wait())
			return err
		}},
		{"snapshot", func(ctx context.Context) error {
			_, err := c.CreateSnapshot(ctx, base.ID, api.CreateSnapshotRequest{})
			return err
		}},
		{"stop-start", func(ctx context.Context) error {
			if _, err := c.StopSandbox(ctx, base.ID, zeish.Wait()); err != nil {
				return err
			}
			_, err := c.StartSandbox(ctx, base.ID, zeish.Wait())
			return err
		}},
		{"restore", func(ctx context.Context) error {
			_, err := c.RestoreSnapshot(ctx, snap.ID, zeish.Wait())
			return err
		}},
		{"delete", func(ctx context.Context) error {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMiB: 256}, zeish.Wait())
			if err != nil {
				return err
			}
			_, err = c.DeleteSandbox(ctx, sb.ID, zeish.Wait())
			return err
		}},
	}
	for round := 0; round < *crashRounds; round++ {
		op := ops[(round+rng.IntN(len(ops)))%len(ops)]
		delay := time.Duration(rng.IntN(4000)) * time.Millisecond
		t.Logf("round %d: %s, kill -9 after %v", round, op.name, delay)
		octx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- op.run(octx) }()
		finished := false
		select {
		case err := <-done:
			finished = true
			t.Logf("round %d: %s finished before the kill: %v", round, op.name, err)
		case <-time.After(delay):
		}
		s.remember()
		s.zeishd.Kill()
		cancel()
		if !finished {
			<-done
		}
		s.start()
		checkAfterCrash(t, ctx, s, base.ID)
	}

	t.Run("kill -9 of one QEMU", func(t *testing.T) {
		a, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "crash-victim", MemoryMiB: 256}, zeish.Wait())
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "crash-bystander", MemoryMiB: 256}, zeish.Wait())
		if err != nil {
			t.Fatal(err)
		}
		pids := s.pidsOf(a.ID)
		if len(pids) != 1 {
			t.Fatalf("victim VM processes: %v", pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		got, err := c.WaitSandbox(ctx, a.ID, api.WaitRequest{TimeoutSeconds: 120})
		for err == nil && got.State == sandbox.StateRunning {
			time.Sleep(500 * time.Millisecond)
			got, err = c.GetSandbox(ctx, a.ID)
		}
		if err != nil || got.State != sandbox.StateError || !strings.HasPrefix(got.StateReason, "vm_exited") {
			t.Fatalf("victim after kill -9 of its QEMU: %s %q %v; want error vm_exited", got.State, got.StateReason, err)
		}
		running := func() float64 { return sandboxUsage(ctx, t, c, a.ID).RunningSeconds }
		before := running()
		time.Sleep(2 * time.Second)
		if after := running(); after != before {
			t.Fatalf("a dead VM is still billed as running: %.1f s → %.1f s", before, after)
		}
		if got := shell(t, connect(t, c, b.ID), "echo alive"); got != "alive" {
			t.Fatalf("bystander: %q", got)
		}
	})
}

// checkAfterCrash waits for every sandbox to settle after a restart and
// checks what recovery promises.
func checkAfterCrash(t *testing.T, ctx context.Context, s *server, baseID string) {
	t.Helper()
	c := s.client
	var list []zeish.Sandbox
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		var err error
		list, err = c.ListSandboxes(ctx, zeish.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		settled := true
		for _, sb := range list {
			settled = settled && sb.State.Settled()
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxes did not settle after the restart: %+v", list)
		}
	}
	live := map[string]bool{}
	for _, sb := range list {
		switch sb.State {
		case sandbox.StateRunning:
			live[sb.ID] = true
			want := "ok"
			if sb.ID == baseID || sb.ParentID == baseID {
				want = "keep"
			}
			if got := shellAfterRestart(t, ctx, c, sb.ID, "cat /root/data 2>/dev/null || echo ok"); got != want {
				t.Fatalf("%s (%s) after a crash: %q, want %q", sb.ID, sb.Name, got, want)
			}
		case sandbox.StatePaused:
			live[sb.ID] = true
		case sandbox.StateError:
			live[sb.ID] = true // its VM may be kept, paused, for the user to delete
			if sb.StateReason == "" {
				t.Fatalf("%s is error without a reason", sb.ID)
			}
			t.Logf("%s (%s) is error: %s", sb.ID, sb.Name, sb.StateReason)
		}
	}
	if b, err := c.GetSandbox(ctx, baseID); err == nil && b.State == sandbox.StateStopped {
		if _, err := c.StartSandbox(ctx, baseID, zeish.Wait()); err != nil {
			t.Fatalf("start the base after a crash: %v", err)
		}
		if got := shellAfterRestart(t, ctx, c, baseID, "cat /root/data"); got != "keep" {
			t.Fatalf("base lost its data: %q", got)
		}
		live[baseID] = true // started just now: its VM is its own
	}
	vmms := map[string]int{}
	for _, pid := range procscan.Under(filepath.Join(s.dataDir, "sandboxes")) {
		args := strings.Join(procscan.Args(pid), " ")
		owner := ""
		for id := range live {
			if strings.Contains(args, "/"+id+"/") {
				owner = id
			}
		}
		if owner == "" {
			t.Fatalf("a VM process (pid %d) runs for no live sandbox: %s", pid, args)
		}
		if vmms[owner]++; vmms[owner] > 1 {
			t.Fatalf("sandbox %s has %d VM processes", owner, vmms[owner])
		}
	}
	if files := s.shmFiles(); len(files) > 0 {
		for _, f := range files {
			owner := false
			for id := range live {
				owner = owner || strings.Contains(f, id)
			}
			if !owner {
				t.Fatalf("RAM file of a sandbox that is not live: %s", f)
			}
		}
	}
}

// shellAfterRestart runs a shell command in a sandbox that recovery may
// still be re-attaching (its agent connection is replaced meanwhile): an
// unavailable channel is retried, anything else fails the test.
func shellAfterRestart(t *testing.T, ctx context.Context, c *zeish.Client, id, script string) string {
	t.Helper()
	var last error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		conn, err := c.Connect(ctx, id)
		if err != nil {
			last = err
			continue
		}
		var out, errOut strings.Builder
		res, err := conn.Exec(ctx, api.ExecRequest{Argv: []string{"sh", "-c", script}}, &out, &errOut)
		if err == nil && res.ExitCode == 0 {
			return strings.TrimSpace(out.String())
		}
		if err == nil {
			t.Fatalf("%q in %s: exit %d: %s", script, id, res.ExitCode, errOut.String())
		}
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("%q in %s: %v", script, id, err)
		}
		last = err
	}
	t.Fatalf("%q in %s: still unavailable after a restart: %v", script, id, last)
	return ""
}
