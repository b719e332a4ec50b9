package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// TestAccelAndBootErrors: /healthz says which accelerator runs the guests
// and why, and every sandbox reports the same; a sandbox whose guest cannot
// boot ends in error with a stable code and the guest's last words, within
// the boot bound, through the API, the SDK and zeishctl, leaving nothing
// behind.
func TestAccelAndBootErrors(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	h, err := s.client.Health(ctx)
	if err != nil || (h.Accel != "kvm" && h.Accel != "tcg") || h.AccelReason == "" || h.AccelProbeMS < 0 {
		t.Fatalf("health %+v, %v: want an accel with a reason", h, err)
	}
	if !strings.Contains(s.logText(), "accel_reason=") {
		t.Errorf("the startup log does not report the accelerator's reason")
	}

	// Two templates whose guests cannot boot: a kernel that is not one
	// (QEMU refuses it), and a real kernel with a garbage initramfs (the
	// guest panics, printing why on its console).
	tpl := testenv.BaseTemplate(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("this is not a kernel\n", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	addTemplate(t, s, sandbox.Template{ID: "tpl_brokenkernel0000000", Name: "broken-kernel", Kernel: garbage,
		Initrd: tpl.Initrd, BaseDisk: tpl.BaseDisk, KernelArgs: tpl.KernelArgs, Hash: "broken-kernel", DiskMiB: tpl.DiskMiB})
	addTemplate(t, s, sandbox.Template{ID: "tpl_brokeninitrd000000", Name: "broken-initrd", Kernel: tpl.Kernel,
		Initrd: garbage, BaseDisk: tpl.BaseDisk, KernelArgs: tpl.KernelArgs, Hash: "broken-initrd", DiskMiB: tpl.DiskMiB})

	// The SDK raises the code and the message.
	_, err = s.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: "broken-kernel", MemoryMiB: 256}, zeish.Wait())
	var sbErr *zeish.SandboxError
	if !errors.As(err, &sbErr) || !errors.Is(err, errdefs.ErrInvalidState) || sbErr.Sandbox.ErrorCode != sandbox.ErrBootFailed ||
		!strings.Contains(sbErr.Sandbox.ErrorMessage, "kernel") {
		t.Fatalf("create from a garbage kernel: %v; want a SandboxError with boot_failed and QEMU's words", err)
	}
	if sb, _ := s.client.GetSandbox(ctx, sbErr.Sandbox.ID); sb.State != sandbox.StateError || sb.Accel != h.Accel {
		t.Fatalf("the failed sandbox: %+v", sb)
	}

	// zeishctl exits non-zero and prints the code and the console's lines.
	began := time.Now()
	out, errOut, code := s.zeishctl(t, "", "sandboxes", "create", "--template", "broken-initrd", "--name", "panics",
		"--memory-mib", "256", "--wait")
	if code == 0 || !strings.Contains(errOut, "boot_failed") || !strings.Contains(errOut, "Kernel panic") {
		t.Fatalf("create --wait of a panicking guest: exit %d\nstdout %s\nstderr %s\nwant non-zero, boot_failed and the console's panic", code, out, errOut)
	}
	t.Logf("a panicking guest was reported in %s:\n%s", time.Since(began).Round(time.Millisecond), errOut)
	var panicked sandbox.Sandbox
	if st := s.do(t, "GET", api.BasePath+"/public/sandboxes/panics", s.key, nil, &panicked); st != 200 ||
		panicked.ErrorCode != sandbox.ErrBootFailed || !strings.Contains(panicked.ErrorMessage, "Kernel panic") {
		t.Fatalf("GET by name: %d %+v", st, panicked)
	}
	// Nothing is left of either VM.
	time.Sleep(300 * time.Millisecond)
	if p := procscan.Under(s.dataDir); len(p) != 0 {
		t.Fatalf("VM processes left: %v", p)
	}
	if s.remember(); len(s.shmFiles()) != 0 {
		t.Fatalf("RAM files left: %v", s.shmFiles())
	}
	for _, id := range []string{sbErr.Sandbox.ID, panicked.ID} {
		if entries, _ := os.ReadDir(filepath.Join(s.dataDir, "sandboxes", id)); len(entries) != 0 {
			t.Fatalf("files left of %s: %v", id, entries)
		}
	}
	// Deleting a sandbox in error frees its name.
	if _, err := s.client.DeleteSandbox(ctx, "panics", zeish.Wait()); err != nil {
		t.Fatalf("delete by name: %v", err)
	}
}

// addTemplate writes a template straight into zeishd's store: a fixture for
// templates no builder would make.
func addTemplate(t *testing.T, s *server, tpl sandbox.Template) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(s.dataDir, "zeish.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tpl.CreatedAt = time.Now().UTC()
	if err := st.PutTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
}

// TestNamesWhereIDsWork: every sandbox route takes the name as well as the
// id, through the API, the Go SDK and zeishctl; snapshots by name under
// their sandbox; names are per account, refused twice, free again once
// their holder is destroyed; bad references get a clear 400.
func TestNamesWhereIDsWork(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 10*time.Minute)
	sb, err := s.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "named-box", MemoryMiB: 256}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	if h, _ := s.client.Health(ctx); sb.Accel != h.Accel {
		t.Fatalf("sandbox accel %q, health says %q", sb.Accel, h.Accel)
	}
	// SDK: get, exec and snapshot by name.
	if got, err := s.client.GetSandbox(ctx, "named-box"); err != nil || got.ID != sb.ID {
		t.Fatalf("get by name: %+v %v", got, err)
	}
	conn, err := s.client.Connect(ctx, "named-box")
	if err != nil {
		t.Fatal(err)
	}
	if out := shell(t, conn, "hostname; echo one > /root/f"); out != "named-box" {
		t.Fatalf("exec by name: hostname %q", out)
	}
	snap, err := s.client.CreateSnapshot(ctx, "named-box", zeish.CreateSnapshotRequest{Name: "before"})
	if err != nil {
		t.Fatal(err)
	}
	// CLI: exec by name.
	if out, errOut, code := s.zeishctl(t, "", "exec", "named-box", "--", "sh", "-c", "echo two > /root/f; cat /root/f"); code != 0 || out != "two\n" {
		t.Fatalf("zeishctl exec by name: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := s.zeishctl(t, "", "snapshots", "get", "before", "--sandbox", "named-box", "-o", "json"); code != 0 || !strings.Contains(out, snap.ID) {
		t.Fatalf("zeishctl snapshots get by name: %d %q %q", code, out, errOut)
	}
	// Snapshot routes under the sandbox, by name and by id.
	base := api.BasePath + "/public/sandboxes/named-box/snapshots/"
	var got sandbox.Snapshot
	for _, ref := range []string{"before", snap.ID} {
		if st := s.do(t, "GET", base+ref, s.key, nil, &got); st != 200 || got.ID != snap.ID {
			t.Fatalf("GET snapshot %s: %d %+v", ref, st, got)
		}
	}
	// New sandboxes from the snapshot: the sandbox as it was then; the
	// sandbox itself carries on as it is.
	kids, err := s.client.CloneSnapshot(ctx, "named-box", "before", zeish.CloneRequest{Name: "from-before"}, zeish.Wait())
	if err != nil || len(kids.Sandboxes) != 1 || kids.Sandboxes[0].State != sandbox.StateRunning || kids.Sandboxes[0].ParentID == "" {
		t.Fatalf("clone from a snapshot: %+v %v", kids, err)
	}
	kid, err := s.client.Connect(ctx, kids.Sandboxes[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if out := shell(t, kid, "cat /proc/sys/kernel/hostname; cat /root/f"); out != "from-before\none" {
		t.Errorf("child of the snapshot: %q, want its own hostname and the file as it was", out)
	}
	if out := shell(t, conn, "cat /root/f"); out != "two" {
		t.Errorf("the snapshot's sandbox after a clone from it: %q", out)
	}
	if _, err := s.client.DeleteSandbox(ctx, kids.Sandboxes[0].ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	var restored api.RestoreResponse
	if st := s.do(t, "POST", base+"before/restore?wait=true", s.key, nil, &restored); st != 200 || restored.Sandbox.State != sandbox.StateRunning {
		t.Fatalf("restore by name: %d %+v", st, restored)
	}
	if out := shell(t, conn, "cat /root/f"); out != "one" {
		t.Fatalf("after restore by name: %q", out)
	}

	// Bad references, and other accounts' names.
	acct, _ := s.client.CreateAccount(ctx, "other")
	key, _ := s.client.CreateAPIKey(ctx, acct.ID)
	var e api.ErrorBody
	for _, c := range []struct {
		key, path string
		status    int
		code      string
	}{
		{s.key, "/public/sandboxes/Not_A_Name", 400, "invalid_argument"},
		{s.key, "/public/sandboxes/sbx_00000000000000000000", 404, "not_found"},
		{s.key, "/public/sandboxes/no-such-box", 404, "not_found"},
		{s.key, "/public/sandboxes/named-box/snapshots/no-such-snapshot", 404, "not_found"},
		{s.key, "/public/sandboxes/named-box/snapshots/snp_00000000000000000000", 404, "not_found"},
		{key.Key, "/public/sandboxes/named-box", 404, "not_found"},
		{key.Key, "/public/sandboxes/named-box/snapshots/before", 404, "not_found"},
	} {
		e = api.ErrorBody{}
		if st := s.do(t, "GET", api.BasePath+c.path, c.key, nil, &e); st != c.status || e.Error.Code != c.code {
			t.Errorf("GET %s: %d %+v, want %d %s", c.path, st, e, c.status, c.code)
		}
	}
	// The other account may use the same name for its own sandbox.
	other := s.clientFor(t, key.Key)
	if o, err := other.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "named-box", MemoryMiB: 256}); err != nil {
		t.Fatalf("same name, other account: %v", err)
	} else if _, err := other.DeleteSandbox(ctx, o.ID, zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	// Twice in one account is refused; once destroyed, the name is free.
	if _, err := s.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "named-box", MemoryMiB: 256}); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Fatalf("duplicate name: %v, want name_taken", err)
	}
	if _, err := s.client.DeleteSandbox(ctx, "named-box", zeish.Wait()); err != nil {
		t.Fatal(err)
	}
	again, err := s.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: "named-box", MemoryMiB: 256})
	if err != nil || again.ID == sb.ID {
		t.Fatalf("reuse a destroyed sandbox's name: %+v %v", again, err)
	}
	var old sandbox.Sandbox
	if st := s.do(t, "GET", api.BasePath+"/public/sandboxes/"+sb.ID, s.key, nil, &old); st != 200 || old.State != sandbox.StateDestroyed {
		t.Fatalf("the destroyed holder by id: %d %+v", st, old)
	}
	if got, err := s.client.GetSandbox(ctx, "named-box"); err != nil || got.ID != again.ID {
		t.Fatalf("the name now names the new sandbox: %+v %v", got, err)
	}
	if _, err := s.client.DeleteSandbox(ctx, "named-box", zeish.Wait()); err != nil {
		t.Fatal(err)
	}
}

// TestAccelProbeCommand: `zeishd --accel-probe` runs the decision again and
// prints the verdict, with a reason, for the operator.
func TestAccelProbeCommand(t *testing.T) {
	testenv.RequireQEMU(t)
	buildBinaries(t)
	cmd := exec.Command(filepath.Join(bin, "zeishd"), "--accel-probe")
	cmd.Env = append(os.Environ(), "ZEISH_DATA_DIR="+t.TempDir())
	out, err := cmd.Output()
	var v struct {
		Accel  string `json:"accel"`
		Reason string `json:"reason"`
	}
	if err != nil || json.Unmarshal(out, &v) != nil || (v.Accel != "kvm" && v.Accel != "tcg") || v.Reason == "" {
		t.Fatalf("zeishd --accel-probe: %v\n%s", err, out)
	}
	// An unknown accelerator is refused, and says what it wants.
	cmd = exec.Command(filepath.Join(bin, "zeishd"), "--accel-probe")
	cmd.Env = append(os.Environ(), "ZEISH_DATA_DIR="+t.TempDir(), "ZEISH_ACCEL=hvf")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "want kvm, tcg") {
		t.Fatalf("ZEISH_ACCEL=hvf: %v\n%s", err, out)
	}
}
