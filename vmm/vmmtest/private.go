package vmmtest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// requirePrivate checks that a file holding guest memory or state is
// readable by its owner alone, and owned by uid (-1: any owner).
func requirePrivate(t *testing.T, what, path string, uid int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("%s %s: %v", what, path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s %s has mode %v: other users could read a tenant's memory", what, path, fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && uid >= 0 && int(st.Uid) != uid {
		t.Errorf("%s %s is owned by uid %d, want %d", what, path, st.Uid, uid)
	}
}

// processUID is the real uid a process runs as.
func processUID(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return -1
}
