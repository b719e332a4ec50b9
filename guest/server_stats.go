//go:build linux

package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/errdefs"
)

// Where systemStats reads; tests point them elsewhere.
var (
	procStat    = "/proc/stat"
	procMeminfo = "/proc/meminfo"
	statsDisk   = "/"
)

// systemStats reads the guest's CPU time, memory and root disk use.
func systemStats() (SystemStats, error) {
	st := SystemStats{Time: time.Now().UTC(), CPUCount: runtime.NumCPU()}
	b, err := os.ReadFile(procStat)
	if err != nil {
		return st, fmt.Errorf("stats: %v: %w", err, errdefs.ErrInternal)
	}
	if st.CPUBusy, st.CPUTotal, err = cpuTicks(b); err != nil {
		return st, err
	}
	if b, err = os.ReadFile(procMeminfo); err != nil {
		return st, fmt.Errorf("stats: %v: %w", err, errdefs.ErrInternal)
	}
	mem := meminfo(b)
	st.MemTotal, st.MemFree, st.MemAvailable = mem["MemTotal"], mem["MemFree"], mem["MemAvailable"]
	st.MemBuffers, st.MemCached = mem["Buffers"], mem["Cached"]
	var fs unix.Statfs_t
	if err := unix.Statfs(statsDisk, &fs); err != nil {
		return st, fmt.Errorf("stats: statfs %s: %v: %w", statsDisk, err, errdefs.ErrInternal)
	}
	st.DiskTotal = fs.Blocks * uint64(fs.Bsize)
	st.DiskAvailable = fs.Bavail * uint64(fs.Bsize)
	return st, nil
}

// cpuTicks sums the "cpu" line of /proc/stat: every field is time spent,
// idle and iowait are not busy. Guest time is already counted in user and
// nice, so guest and guest_nice are left out.
func cpuTicks(procStat []byte) (busy, total uint64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(procStat))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		for i, s := range f[1:min(len(f), 9)] { // user nice system idle iowait irq softirq steal
			n, perr := strconv.ParseUint(s, 10, 64)
			if perr != nil {
				return 0, 0, fmt.Errorf("stats: /proc/stat field %q: %w", s, errdefs.ErrInternal)
			}
			total += n
			if i != 3 && i != 4 {
				busy += n
			}
		}
		return busy, total, nil
	}
	return 0, 0, fmt.Errorf("stats: no cpu line in /proc/stat: %w", errdefs.ErrInternal)
}

// meminfo reads /proc/meminfo's "Name: N kB" lines into bytes.
func meminfo(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		out[name] = n
	}
	return out
}
