package nodestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// A node's private state survives a restart (it is read back from the
// data dir), a temporary file a crash left is ignored, and a destroyed
// sandbox's state goes.
func TestLocalKeepsPrivateStateAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: sandbox.NewID(sandbox.PrefixSandbox), State: sandbox.StateRunning},
		Handle: []byte(`{"pid":7}`), Disk: "/d/disk", Gen: 3, Kernel: "/k"}
	if err := l.save(r); err != nil {
		t.Fatal(err)
	}
	tpl := sandbox.Template{ID: "tpl_1", Name: "t", AccountID: "acc_1", Kernel: "/t/vmlinuz", BaseDisk: "/t/disk", Dir: "/t", KernelArgs: "shared"}
	if err := l.saveTemplate(tpl); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sandboxes", ".tmp-123"), []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.save(&store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "../escape"}}); err == nil {
		t.Fatal("an id that is no sandbox id named a file")
	}

	again, err := OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := &store.SandboxRecord{Sandbox: r.Sandbox}
	again.merge(got)
	if string(got.Handle) != `{"pid":7}` || got.Disk != "/d/disk" || got.Gen != 3 || got.Kernel != "/k" {
		t.Fatalf("after a restart: %+v", PrivateOf(got))
	}
	gotTpl := sandbox.Template{ID: "tpl_1", Name: "t", AccountID: "acc_1", KernelArgs: "from the row"}
	again.mergeTemplate(&gotTpl)
	if gotTpl.Kernel != "/t/vmlinuz" || gotTpl.BaseDisk != "/t/disk" || gotTpl.Dir != "/t" || gotTpl.KernelArgs != "from the row" {
		t.Fatalf("template paths after a restart: %+v", gotTpl)
	}

	r.State = sandbox.StateDestroyed
	if err := again.save(r); err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Sandbox(r.ID); ok {
		t.Fatal("a destroyed sandbox's state is kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", r.ID+".json")); !os.IsNotExist(err) {
		t.Fatalf("a destroyed sandbox's file: %v", err)
	}
	if err := again.dropTemplate(tpl.Key()); err != nil {
		t.Fatal(err)
	}
	if third, _ := OpenLocal(dir); len(third.templates) != 0 || len(third.sandboxes) != 0 {
		t.Fatalf("left behind: %v %v", third.templates, third.sandboxes)
	}
}
