// Package procscan finds processes by their command line, reading /proc.
// Recovery uses it to sweep VMMs a crash left behind, and tests to prove
// that nothing was left behind.
package procscan

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Process is a live process and its command line.
type Process struct {
	PID  int
	Args []string
}

// Args returns the argv of pid, or nil if there is no such process, it is a
// zombie (whose cmdline reads empty) or it cannot be read.
func Args(pid int) []string {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// All lists every live process but this one, with its command line.
// Kernel threads and zombies, which have none, are left out.
func All() []Process {
	entries, _ := os.ReadDir("/proc")
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if args := Args(pid); args != nil {
			out = append(out, Process{PID: pid, Args: args})
		}
	}
	return out
}

// Mentioning lists the live processes (not this one) one of whose arguments
// contains s.
func Mentioning(s string) []int {
	var pids []int
	for _, p := range All() {
		if slices.ContainsFunc(p.Args, func(a string) bool { return strings.Contains(a, s) }) {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// Under lists the live processes (not this one) one of whose arguments names
// a path inside dir.
func Under(dir string) []int { return Mentioning(filepath.Clean(dir) + "/") }

// OptionValues collects the values of a comma-separated option key=… (as
// in QEMU's -object …,mem-path=/dev/shm/x,…) on the command lines of every
// live process but this one: which RAM files some VMM maps, whatever the
// records say.
func OptionValues(key string) map[string]bool {
	out := map[string]bool{}
	prefix := key + "="
	for _, p := range All() {
		for _, a := range p.Args {
			if i := strings.Index(a, prefix); i >= 0 {
				v, _, _ := strings.Cut(a[i+len(prefix):], ",")
				out[v] = true
			}
		}
	}
	return out
}
