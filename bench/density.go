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
		about: "(only with -only density) many live children of one sandbox: all answer exec; each child's unique cost (PSS, private guest pages, QEMU's own), by tb-size",
		run:   runDensity,
		optIn: true,
	})
	flag.IntVar(&densityChildrenFlag, "density-children", 100, "density: live children to make")
	flag.IntVar(&densityMemoryFlag, "density-memory", 1024, "density: the parent's memory in MiB")
	flag.StringVar(&densityTBFlag, "density-tb-sizes", "128", "density: ZEISH_TCG_TB_MIB values, one full run each")
	flag.IntVar(&densityFloorFlag, "density-floor-mib", 4096, "density: stop forking when the host's MemAvailable falls below this")
}

var (
	densityChildrenFlag, densityMemoryFlag, densityFloorFlag int
	densityTBFlag                                            string
)

// densityBatch is the most children one clone call makes.
const densityBatch = 16

// densityGoalMiB is the aim for one idle child's unique cost.
const densityGoalMiB = 16

func runDensity(ctx context.Context, e *benchEnv) (*report, error) {
	r := &report{Section: "density", Title: fmt.Sprintf("Density: live children of one %d MiB sandbox (%s)", densityMemoryFlag, e.accel)}
	t := &table{Title: "per idle child after all answered exec: median / p90 (MiB)",
		Header: []string{"tb-size MiB", "children alive", "all answered exec", "PSS", "guest private pages", "QEMU's own (Rss − guest Rss)",
			"host MemAvailable drop MiB", "fork calls: parent pause ms (median)", "make all ms"}}
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
		fmt.Sprintf("forking stops early if the host's MemAvailable falls below %d MiB", densityFloorFlag))
	return r, nil
}

// densityAt makes the children with zeishd's tb-size set to tb and measures them.
func (e *benchEnv) densityAt(ctx context.Context, r *report, tb int) (_ []string, err error) {
	if err := e.restartWith(ctx, "ZEISH_TCG_TB_MIB="+strconv.Itoa(tb), "ZEISH_MEMORY_BUDGET_MIB=0",
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
	for _, id := range kids {
		if err := e.firstExec(ctx, id); err != nil {
			e.log.Error("density: child does not answer", "id", id, "err", err)
			continue
		}
		answered++
	}
	time.Sleep(idleBeforeMeasure)
	var pss, private, own []float64
	for _, id := range kids {
		pid, err := e.sandboxPID(id)
		if err != nil {
			return nil, err
		}
		m, err := qemuMemory(pid)
		if err != nil {
			return nil, err
		}
		pss, private, own = append(pss, toMiB(m.TotalPss)), append(private, toMiB(m.GuestPrivateDirty)), append(own, toMiB(m.QEMUOwn))
	}
	drop := float64(before - memAvailableMiB())
	tag := fmt.Sprintf("tb%d", tb)
	sp := r.add(newSeries("child_pss_"+tag, "MiB", pss))
	r.add(newSeries("child_guest_private_"+tag, "MiB", private))
	r.add(newSeries("child_qemu_own_"+tag, "MiB", own))
	r.addGoal(goal{Name: fmt.Sprintf("idle child's PSS, tb-size %d", tb), Target: fmt.Sprintf("≤ %d MiB", densityGoalMiB),
		Value: sp.Median, Unit: "MiB", Met: sp.Median <= densityGoalMiB})
	r.addGoal(goal{Name: fmt.Sprintf("live children answering exec, tb-size %d", tb), Target: fmt.Sprintf("%d", densityChildrenFlag),
		Value: float64(answered), Met: answered == densityChildrenFlag})
	mp := func(s []float64) string { return fmtNum(median(s)) + " / " + fmtNum(percentile(s, 0.9)) }
	e.log.Info("density", "tb_mib", tb, "children", len(kids), "answered", answered, "pss", mp(pss), "private", mp(private), "own", mp(own), "drop_mib", drop)
	return []string{strconv.Itoa(tb), strconv.Itoa(len(kids)) + stopped, strconv.Itoa(answered), mp(pss), mp(private), mp(own),
		fmtNum(drop), fmtNum(median(pauses)), fmtNum(ms(makeAll))}, nil
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
