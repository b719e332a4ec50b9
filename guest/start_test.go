//go:build linux

package guest

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The start command runs once per boot (its marker lives in /run), in the
// background; one that cannot start is logged and leaves the agent usable.
func TestStartOnce(t *testing.T) {
	startDir = t.TempDir()
	t.Cleanup(func() { startDir = "/run/zeish" })
	s := NewServer(slog.New(slog.DiscardHandler), "test")
	out := filepath.Join(t.TempDir(), "count")
	cmd := []string{"sh", "-c", "echo x >> " + out}
	for range 3 {
		if err := s.startOnce(cmd); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile(out); len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if b, _ := os.ReadFile(out); string(b) != "x\n" {
		t.Errorf("start command ran %q, want once", b)
	}
	os.Remove(filepath.Join(startDir, "started"))
	err := s.startOnce([]string{"/no/such/start-cmd"})
	if err == nil || !strings.Contains(err.Error(), "start-cmd") {
		t.Errorf("missing start command: %v", err)
	}
}
