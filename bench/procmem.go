package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/zeish/zeish/internal/testenv"
)

// vmMemory is how much of the host's memory one VM's QEMU process holds.
type vmMemory struct {
	GuestPrivateDirty int64 // Private_Dirty of the guest-RAM mapping: what this VM alone added
	// GuestAnon is Anonymous of the guest-RAM mapping: the pages this VM
	// copied on write from an image's RAM file it maps privately. Unlike
	// Private_Dirty it leaves out the image's own pages (dirty in tmpfs)
	// that this VM happens to be the only one to map, which the image holds
	// whether or not any VM maps them.
	GuestAnon int64
	GuestRss  int64 // resident pages of the guest-RAM mapping, shared ones included
	TotalRss  int64 // the whole process
	TotalPss  int64 // the whole process, each shared page divided among its mappers
	QEMUOwn   int64 // TotalRss − GuestRss: QEMU's own heap, TCG cache, libraries
}

// memPath returns the mem-path= of the guest-RAM memory-backend-file on a
// QEMU command line (NUL-separated, as in /proc/PID/cmdline).
func memPath(cmdline []byte) (string, error) {
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		for _, opt := range strings.Split(string(arg), ",") {
			if p, ok := strings.CutPrefix(opt, "mem-path="); ok {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no mem-path= on the command line")
}

// parseSmaps sums, over /proc/PID/smaps, the mappings of file (its path,
// possibly followed by " (deleted)") and the whole process.
func parseSmaps(r io.Reader, file string) (vmMemory, error) {
	var m vmMemory
	inFile, found := false, false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") || strings.Contains(fields[0], "-") {
			// A mapping header: "start-end perms offset dev inode [path]".
			path := ""
			if len(fields) >= 6 {
				path = strings.TrimSuffix(strings.Join(fields[5:], " "), " (deleted)")
			}
			inFile = path == file
			found = found || inFile
			continue
		}
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			m.TotalRss += kb << 10
			if inFile {
				m.GuestRss += kb << 10
			}
		case "Pss:":
			m.TotalPss += kb << 10
		case "Private_Dirty:":
			if inFile {
				m.GuestPrivateDirty += kb << 10
			}
		case "Anonymous:":
			if inFile {
				m.GuestAnon += kb << 10
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if !found {
		return m, fmt.Errorf("no mapping of %s", file)
	}
	m.QEMUOwn = m.TotalRss - m.GuestRss
	return m, nil
}

// qemuMemory measures the QEMU process pid: its guest-RAM mapping is found by
// the mem-path on its own command line.
func qemuMemory(pid int) (vmMemory, error) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return vmMemory{}, err
	}
	file, err := memPath(cmdline)
	if err != nil {
		return vmMemory{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return vmMemory{}, err
	}
	defer f.Close()
	m, err := parseSmaps(f, file)
	if err != nil {
		return m, fmt.Errorf("pid %d smaps: %w", pid, err)
	}
	return m, nil
}

// sandboxPID finds the QEMU process of a sandbox: the pid in the handle the
// node persists (<data>/sandboxes/<id>/handle.json), else the process whose
// -name is the driver's tag "zeish-<id>".
func (e *benchEnv) sandboxPID(id string) (int, error) {
	var h struct {
		PID int `json:"pid"`
	}
	// The handle beside its newest VM (vm-<gen>) names the process, even one
	// launched for another id (a ready VM it adopted).
	files, _ := filepath.Glob(filepath.Join(e.dataDir, "sandboxes", id, "vm-*", "handle.json"))
	slices.SortFunc(files, func(a, b string) int { return vmGen(b) - vmGen(a) })
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &h) == nil && h.PID > 0 && syscall.Kill(h.PID, 0) == nil {
			return h.PID, nil
		}
	}
	tag := []byte("\x00-name\x00zeish-" + id + ",")
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline")); err == nil && bytes.Contains(cmdline, tag) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no QEMU process for sandbox %s", id)
}

// sandboxDiskBytes is the space on disk (allocated blocks, not apparent
// size) of the qcow2 files in a sandbox's folder: what the sandbox's disk
// costs beyond the shared base and whatever it backs onto elsewhere.
func (e *benchEnv) sandboxDiskBytes(id string) (int64, error) {
	files, err := filepath.Glob(filepath.Join(e.dataDir, "sandboxes", id, "*.qcow2"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("sandbox %s has no qcow2 file", id)
	}
	var total int64
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			return 0, err
		}
		total += st.Blocks * 512
	}
	return total, nil
}

const mib = 1 << 20

func toMiB(b int64) float64 { return float64(b) / mib }

// imageRAMMiB is the memory the server's images hold: the allocated size of
// the RAM file of every image in its data dir.
func imageRAMMiB(dataDir string) float64 {
	var total int64
	for _, f := range testenv.ImageRAMFiles(dataDir) {
		var st syscall.Stat_t
		if syscall.Stat(f, &st) == nil {
			total += st.Blocks * 512
		}
	}
	return float64(total) / (1 << 20)
}

// vmGen is the generation in a path of <sandbox>/vm-<gen>/….
func vmGen(path string) int {
	g, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(path)), "vm-"))
	return g
}
