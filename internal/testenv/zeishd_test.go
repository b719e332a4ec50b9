package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A zeishd that dies at start must fail Start with its own words, and leave
// nothing for the caller to stop.
func TestZeishdStartReportsEarlyExit(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "zeishd")
	script := "#!/bin/sh\necho \"cannot open $ZEISH_DATA_DIR at $ZEISH_LISTEN ($EXTRA)\" >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	z := &Zeishd{Bin: bin, DataDir: dir, Env: []string{"EXTRA=extra"}}
	err := z.Start(context.Background())
	want := "cannot open " + dir + " at " + z.Addr + " (extra)"
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), want) {
		t.Errorf("Start: %v, want the early exit and %q", err, want)
	}
	if z.Running() {
		t.Error("Running after a failed Start")
	}
}

func TestLogBufferTail(t *testing.T) {
	var l LogBuffer
	l.Write([]byte("abcdef"))
	if got := l.Tail(10); got != "abcdef" {
		t.Errorf("Tail(10) = %q", got)
	}
	if got := l.Tail(3); got != "…def" {
		t.Errorf("Tail(3) = %q", got)
	}
}
