package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name:  "density",
		about: "(only with -only density) many live children of one sandbox: all answer exec; each child's unique cost (PSS, private guest pages, QEMU's own) and CPU while idle, by the children's tb-size",
		run:   runDensity,
		optIn: true,
	})
	flag.IntVar(&densityChildrenFlag, "density-children", 100, "density: live children to make")
	flag.IntVar(&densityMemoryFlag, "density-memory", 1024, "density: the parent's memory in MiB")
	flag.StringVar(&densityTBFlag, "density-tb-sizes", "16", "density: the children's translation cache (ZEISH_TCG_CLONE_TB_MIB) in MiB, one full run each")
	flag.IntVar(&densityFloorFlag, "density-floor-mib", 4096, "density: stop forking when the host's MemAvailable falls below this")
}

var (
	densityChildrenFlag, densityMemoryFlag, densityFloorFlag int
	densityTBFlag                                            string
)

// densityBatch is the most children one clone call makes.
const densityBatch = 16

// densityBusyChildren is how many children run the CPU-bound exec.
const densityBusyChildren = 3

// densityGoalMiB is the aim for one idle child's unique cost.
const densityGoalMiB = 16

func runDensity(ctx context.Context, e *benchEnv) (*report, error) {
	r := &report{Section: "density", Title: fmt.Sprintf("Density: live children of one %d MiB sandbox (%s)", densityMemoryFlag, e.accel)}
	t := &table{Title: "per idle child after all answered exec: median / p90 (MiB)",
		Header: []string{"children's tb-size MiB", "children alive", "answered exec (after making; at the end)", "PSS", "guest private pages", "QEMU's own (Rss − guest Rss)",
			"first exec ms (median)", "CPU-bound exec ms (median)", "CPU per idle child %", "load average (1 min) idle", "host MemAvailable drop MiB", "fork calls: parent pause ms (median)", "make all ms"}}
	for _, f := range strings.Split(densityTBFlag, ",") {
		tb, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || tb < 0 {
			return nil, fmt.Errorf("-density-tb-sizes %q", densityTBFlag)
		}
		row, err := e.densityAt(ctx, r, tb)
		if err != nil {
			return nil, err
		}
		t.Rows = append(t.Rows, row)
	}
	r.Tables = append(r.Tables, t)
	r.Notes = append(r.Notes,
		fmt.Sprintf("children are made by clone calls of up to %d on the running parent; every call after the first captures the parent live into a new image, so batches share their own image", densityBatch),
		"PSS: the child's QEMU process, shared pages (image RAM, libraries) divided among their mappers; guest private pages: Private_Dirty of its guest-RAM mapping",
		fmt.Sprintf("first exec: `true` in each child right after all were made, one after another; CPU-bound exec: tbsize's script (shell loop, awk, md5sum) in %d children", densityBusyChildren),
		fmt.Sprintf("CPU per idle child: its QEMU's utime+stime over %s once all answered, in %% of one core; load average: the host's 1-minute figure at the end of that window (other sessions' work included)", densityCPUWindow),
		fmt.Sprintf("forking stops early if the host's MemAvailable falls below %d MiB", densityFloorFlag))
	return r, nil
}

// densityAt makes the children with zeishd's tb-size set to tb and measures them.
func (e *benchEnv) densityAt(ctx context.Context, r *report, tb int) (_ []string, err error) {
	if err := e.restartWith(ctx, "ZEISH_TCG_CLONE_TB_MIB="+strconv.Itoa(tb), "ZEISH_MEMORY_BUDGET_MIB=0",
		fmt.Sprintf("ZEISH_PLAN_RUNNING_SLOTS=%d", densityChildrenFlag+10)); err != nil {
		return nil, err
	}
	var made []string
	defer func() {
		if derr := e.deleteAll(ctx, made); derr != nil && err == nil {
			err = derr
		}
	}()
	before := memAvailableMiB()
	parent, _, err := e.createAndExec(ctx, densityMemoryFlag)
	if parent != "" {
		made = append(made, parent)
	}
	if err != nil {
		return nil, err
	}
	var kids []string
	var pauses []float64
	began := time.Now()
	stopped := ""
	for len(kids) < densityChildrenFlag {
		if avail := memAvailableMiB(); avail < densityFloorFlag {
			stopped = fmt.Sprintf(" (stopped: MemAvailable %d MiB)", avail)
			e.log.Warn("density: host memory low, no more children", "available_mib", avail, "children", len(kids))
			break
		}
		n := min(densityBatch, densityChildrenFlag-len(kids))
		resp, err := e.client.CloneSandbox(ctx, parent, zeish.CloneRequest{Count: n}, zeish.Wait())
		for _, c := range resp.Sandboxes {
			e.track(c.ID)
			made = append(made, c.ID)
			kids = append(kids, c.ID)
		}
		if err != nil {
			return nil, fmt.Errorf("clone ×%d after %d children: %w", n, len(kids)-len(resp.Sandboxes), err)
		}
		pauses = append(pauses, float64(resp.PauseMS))
		e.log.Info("density: forked", "tb_mib", tb, "children", len(kids), "pause_ms", resp.PauseMS, "available_mib", memAvailableMiB())
	}
	makeAll := time.Since(began)
	answered := 0
	var firsts []float64
	for _, id := range kids {
		t0 := time.Now()
		if err := e.firstExec(ctx, id); err != nil {
			e.log.Error("density: child does not answer", "id", id, "err", err)
			continue
		}
		firsts = append(firsts, ms(time.Since(t0)))
		answered++
	}
	// What a small translation cache costs a child that works: a CPU-bound
	// exec in a few children, one after another.
	var busy []float64
	for _, id := range kids[:min(densityBusyChildren, len(kids))] {
		d, err := e.cpuBoundExec(ctx, id)
		if err != nil {
			return nil, err
		}
		busy = append(busy, ms(d))
	}
	time.Sleep(idleBeforeMeasure)
	var pss, private, own []float64
	pids := make([]int, len(kids))
	for i, id := range kids {
		pid, err := e.sandboxPID(id)
		if err != nil {
			return nil, err
		}
		m, err := qemuMemory(pid)
		if err != nil {
			return nil, err
		}
		pids[i] = pid
		pss, private, own = append(pss, toMiB(m.TotalPss)), append(private, toMiB(m.GuestPrivateDirty)), append(own, toMiB(m.QEMUOwn))
	}
	cpu, err := idleCPU(pids, densityCPUWindow)
	if err != nil {
		return nil, err
	}
	load := loadAverage()
	// Last: every child still answers after the others were made and idled.
	atEnd := 0
	for _, id := range kids {
		if err := e.firstExec(ctx, id); err != nil {
			e.log.Error("density: child does not answer at the end", "id", id, "err", err)
			continue
		}
		atEnd++
	}
	drop := float64(before - memAvailableMiB())
	tag := fmt.Sprintf("tb%d", tb)
	sp := r.add(newSeries("child_pss_"+tag, "MiB", pss))
	r.add(newSeries("child_guest_private_"+tag, "MiB", private))
	r.add(newSeries("child_qemu_own_"+tag, "MiB", own))
	r.add(newSeries("child_idle_cpu_"+tag, "%", cpu))
	r.addGoal(goal{Name: fmt.Sprintf("idle child's PSS, tb-size %d", tb), Target: fmt.Sprintf("≤ %d MiB", densityGoalMiB),
		Value: sp.Median, Unit: "MiB", Met: sp.Median <= densityGoalMiB})
	r.addGoal(goal{Name: fmt.Sprintf("live children answering exec at the end, tb-size %d", tb), Target: fmt.Sprintf("%d", densityChildrenFlag),
		Value: float64(atEnd), Met: answered == densityChildrenFlag && atEnd == densityChildrenFlag})
	mp := func(s []float64) string { return fmtNum(median(s)) + " / " + fmtNum(percentile(s, 0.9)) }
	e.log.Info("density", "tb_mib", tb, "children", len(kids), "answered", answered, "at_end", atEnd, "pss", mp(pss), "private", mp(private),
		"own", mp(own), "cpu_pct", mp(cpu), "load", load, "drop_mib", drop)
	return []string{strconv.Itoa(tb), strconv.Itoa(len(kids)) + stopped, fmt.Sprintf("%d; %d", answered, atEnd), mp(pss), mp(private), mp(own),
		fmtNum(median(firsts)), fmtNum(median(busy)), mp(cpu), load, fmtNum(drop), fmtNum(median(pauses)), fmtNum(ms(makeAll))}, nil
}

// cpuBoundExec runs tbsize's cpuScript in sandbox id and times it.
func (e *benchEnv) cpuBoundExec(ctx context.Context, id string) (time.Duration, error) {
	conn, err := e.client.Connect(ctx, id)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{"sh", "-c", cpuScript}}, nil, nil)
	if err != nil {
		return 0, fmt.Errorf("cpu-bound exec in %s: %w", id, err)
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("cpu-bound exec in %s: exit %d", id, res.ExitCode)
	}
	return time.Since(start), nil
}

// densityCPUWindow is how long the children's idle CPU is measured.
const densityCPUWindow = 10 * time.Second

// idleCPU is each process's CPU time (user + system) over window, in
// percent of one core, all measured over the same window.
func idleCPU(pids []int, window time.Duration) ([]float64, error) {
	before := make([]int64, len(pids))
	for i, pid := range pids {
		t, err := cpuTicks(pid)
		if err != nil {
			return nil, err
		}
		before[i] = t
	}
	began := time.Now()
	time.Sleep(window)
	took := time.Since(began).Seconds()
	out := make([]float64, len(pids))
	for i, pid := range pids {
		t, err := cpuTicks(pid)
		if err != nil {
			return nil, err
		}
		out[i] = float64(t-before[i]) / clockTicks / took * 100
	}
	return out, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTicks = 100

// cpuTicks is utime + stime of pid, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatTicks(string(b))
}

// parseStatTicks reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted after its last ')'.
func parseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, f[11]; stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: too few fields", stat)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat %q: utime/stime", stat)
	}
	return u + s, nil
}

// loadAverage is the host's 1-minute load average, as /proc/loadavg says it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// memAvailableMiB is the host's MemAvailable.
func memAvailableMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb >> 10
		}
	}
	return 0
}
