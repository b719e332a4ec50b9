package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name:  "fork",
		about: "clone pause and fork → first exec by parent size, fan-out of 8, idle child memory and disk, snapshots",
		run:   runFork,
	})
}

// The targets for forking.
const (
	forkPauseGoalMS     = 100 // parent pause_ms
	forkPauseRatioGoal  = 1.2 // pause at 4 GiB ÷ pause at 256 MiB: flat in memory size
	forkExecGoalPct     = 50  // fork → first exec, % of cold create → first exec
	childPrivateGoalMiB = 8   // idle child's private guest memory
	childDiskGoalMiB    = 1   // disk added per child
	fanOut              = 8
	fanOutParentMiB     = 1024
	idleBeforeMeasure   = 10 * time.Second
)

var forkParentSizes = []int{256, 1024, 4096}

// cloneAndExec forks parent into n children (waiting until they settle),
// then runs a first exec in each at once. It returns the children, the
// parent's pause, the whole call → last exec time and each child's
// call → its exec time.
func (e *benchEnv) cloneAndExec(ctx context.Context, parent string, n int) (children []string, pauseMS float64, total time.Duration, each []time.Duration, err error) {
	start := time.Now()
	resp, err := e.client.CloneSandbox(ctx, parent, zeish.CloneRequest{Count: n}, zeish.Wait())
	for _, c := range resp.Sandboxes {
		e.track(c.ID)
		children = append(children, c.ID)
	}
	if err != nil {
		return children, 0, 0, nil, fmt.Errorf("clone %s ×%d: %w", parent, n, err)
	}
	if len(resp.Sandboxes) != n {
		return children, 0, 0, nil, fmt.Errorf("clone %s ×%d: got %d children", parent, n, len(resp.Sandboxes))
	}
	for _, c := range resp.Sandboxes {
		if c.State != sandbox.StateRunning {
			return children, 0, 0, nil, fmt.Errorf("clone %s: child %s is %s: %s", parent, c.ID, c.State, c.StateReason)
		}
	}
	each = make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, id := range children {
		wg.Go(func() {
			errs[i] = e.firstExec(ctx, id)
			each[i] = time.Since(start)
		})
	}
	wg.Wait()
	total = time.Since(start)
	for _, err := range errs {
		if err != nil {
			return children, 0, 0, nil, err
		}
	}
	return children, float64(resp.PauseMS), total, each, nil
}

func (e *benchEnv) deleteAll(ctx context.Context, ids []string) error {
	var first error
	for _, id := range ids {
		if err := e.deleteSandbox(ctx, id); err != nil && first == nil {
			first = fmt.Errorf("delete %s: %w", id, err)
		}
	}
	return first
}

func runFork(ctx context.Context, e *benchEnv) (_ *report, err error) {
	r := &report{Section: "fork", Title: fmt.Sprintf("Fork and snapshot (%s)", e.accel)}
	var parents []string
	defer func() {
		if derr := e.deleteAll(ctx, parents); derr != nil && err == nil {
			err = derr
		}
	}()

	// 1. Pause and fork → first exec by parent size. Each run forks a fresh
	// parent (its own create is that run's cold reference): that is the
	// capture whose pause is flat in RAM. The first run then forks the same
	// parent again, which first promotes it (its RAM is the image's now):
	// reported apart, since it costs in proportion to the parent's memory.
	bySize := &table{Title: "fork by parent memory (one child per clone call; a fresh parent each run)",
		Header: []string{"parent", "pause ms median", "min", "max", "fork → first exec ms median", "min", "max", "cold create → first exec ms", "fork ÷ cold", "re-fork pause ms", "re-fork → first exec ms", "image RAM after re-fork MiB"}}
	pauseMedian := map[int]float64{}
	for _, mem := range forkParentSizes {
		var pauses, forks, colds []float64
		var rePause, reFork, reImages float64
		for i := range e.opts.runs {
			id, cold, err := e.createAndExec(ctx, mem)
			if id != "" {
				parents = append(parents, id)
			}
			if err != nil {
				return nil, fmt.Errorf("parent %d MiB: %w", mem, err)
			}
			colds = append(colds, ms(cold.Total))
			children, pause, total, _, err := e.cloneAndExec(ctx, id, 1)
			if derr := e.deleteAll(ctx, children); derr != nil && err == nil {
				err = derr
			}
			if err != nil {
				return nil, err
			}
			e.log.Info("fork", "parent_mib", mem, "run", i, "pause_ms", pause, "fork_to_exec_ms", total.Milliseconds())
			pauses, forks = append(pauses, pause), append(forks, ms(total))
			if i == 0 {
				children, pause, total, _, err := e.cloneAndExec(ctx, id, 1)
				time.Sleep(time.Second) // images are made sparse in the background
				reImages = imageRAMMiB(e.dataDir)
				if derr := e.deleteAll(ctx, children); derr != nil && err == nil {
					err = derr
				}
				if err != nil {
					return nil, err
				}
				e.log.Info("re-fork", "parent_mib", mem, "pause_ms", pause, "fork_to_exec_ms", total.Milliseconds())
				rePause, reFork = pause, ms(total)
			}
			if err := e.deleteSandbox(ctx, id); err != nil {
				return nil, fmt.Errorf("delete parent %s: %w", id, err)
			}
			parents = parents[:len(parents)-1]
		}
		tag := fmt.Sprintf("%dmib", mem)
		sp := r.add(newSeries("pause_ms_"+tag, "ms", pauses))
		sf := r.add(newSeries("fork_to_first_exec_"+tag, "ms", forks))
		sc := r.add(newSeries("cold_create_to_first_exec_"+tag, "ms", colds))
		r.add(newSeries("refork_pause_ms_"+tag, "ms", []float64{rePause}))
		r.add(newSeries("refork_to_first_exec_"+tag, "ms", []float64{reFork}))
		r.add(newSeries("refork_image_ram_mib_"+tag, "MiB", []float64{reImages}))
		pct := 100 * sf.Median / sc.Median
		pauseMedian[mem] = sp.Median
		bySize.Rows = append(bySize.Rows, []string{fmt.Sprintf("%d MiB", mem),
			fmtNum(sp.Median), fmtNum(sp.Min), fmtNum(sp.Max), fmtNum(sf.Median), fmtNum(sf.Min), fmtNum(sf.Max),
			fmtNum(sc.Median), fmtNum(pct) + " %", fmtNum(rePause), fmtNum(reFork), fmtNum(reImages)})
		r.addGoal(goal{Name: fmt.Sprintf("parent pause, %d MiB", mem), Target: fmt.Sprintf("≤ %d ms", forkPauseGoalMS),
			Value: sp.Median, Unit: "ms", Met: sp.Median <= forkPauseGoalMS})
		r.addGoal(goal{Name: fmt.Sprintf("fork → first exec ÷ cold create → first exec, %d MiB", mem), Target: fmt.Sprintf("≤ %d %%", forkExecGoalPct),
			Value: pct, Unit: "%", Met: pct <= forkExecGoalPct})
	}
	small, large := forkParentSizes[0], forkParentSizes[len(forkParentSizes)-1]
	if pauseMedian[small] > 0 {
		ratio := pauseMedian[large] / pauseMedian[small]
		r.addGoal(goal{Name: fmt.Sprintf("pause %d MiB ÷ pause %d MiB", large, small), Target: fmt.Sprintf("≤ %.1f", forkPauseRatioGoal),
			Value: ratio, Unit: "×", Met: ratio <= forkPauseRatioGoal})
	}
	r.Tables = append(r.Tables, bySize)

	// 1b. Fanning out again from a paused baseline: its first fork captures
	// it (promoting it, as it ran after an earlier fork); every later fork
	// reuses that image as long as the baseline stays paused.
	if err := e.pausedBaseline(ctx, r, forkParentSizes[0], &parents); err != nil {
		return nil, err
	}

	// 2. Fan-out of 8 from the 1 GiB parent.
	// A fresh parent, so the fan-out is a first fork.
	parent, _, err := e.createAndExec(ctx, fanOutParentMiB)
	if parent != "" {
		parents = append(parents, parent)
	}
	if err != nil {
		return nil, fmt.Errorf("fan-out parent: %w", err)
	}
	children, pause, total, each, err := e.cloneAndExec(ctx, parent, fanOut)
	defer func() {
		if derr := e.deleteAll(ctx, children); derr != nil && err == nil {
			err = derr
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	var eachMS []float64
	for _, d := range each {
		eachMS = append(eachMS, ms(d))
	}
	sTotal := r.add(newSeries("fanout_total", "ms", []float64{ms(total)}))
	sPer := r.add(newSeries("fanout_per_child", "ms", []float64{ms(total) / fanOut}))
	sEach := r.add(newSeries("fanout_each_child_to_first_exec", "ms", eachMS))
	sPause := r.add(newSeries("fanout_pause_ms", "ms", []float64{pause}))
	fan := statTable(fmt.Sprintf("fan-out: %d children from a %d MiB parent in one clone call", fanOut, fanOutParentMiB), "ms")
	fan.Rows = append(fan.Rows,
		statRow("clone call → all children ran their first exec", sTotal),
		statRow("  per child (total ÷ 8)", sPer),
		statRow("clone call → this child's first exec", sEach),
		statRow("parent pause_ms", sPause),
	)
	r.Tables = append(r.Tables, fan)

	// 3. After a while idle: what each child costs in memory and disk.
	e.log.Info("children idle before measuring", "for", idleBeforeMeasure)
	select {
	case <-time.After(idleBeforeMeasure):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var private, guestRss, own, rss, disk []float64
	for _, id := range children {
		pid, err := e.sandboxPID(id)
		if err != nil {
			return nil, fmt.Errorf("child %s pid: %w", id, err)
		}
		m, err := qemuMemory(pid)
		if err != nil {
			return nil, fmt.Errorf("child %s: %w", id, err)
		}
		d, err := e.sandboxDiskBytes(id)
		if err != nil {
			return nil, err
		}
		private, guestRss = append(private, toMiB(m.GuestPrivateDirty)), append(guestRss, toMiB(m.GuestRss))
		own, rss, disk = append(own, toMiB(m.QEMUOwn)), append(rss, toMiB(m.TotalRss)), append(disk, toMiB(d))
	}
	sPriv := r.add(newSeries("idle_child_guest_private_dirty", "MiB", private))
	sGRss := r.add(newSeries("idle_child_guest_rss", "MiB", guestRss))
	sOwn := r.add(newSeries("idle_child_qemu_own", "MiB", own))
	sRss := r.add(newSeries("idle_child_qemu_rss", "MiB", rss))
	sDisk := r.add(newSeries("child_disk_on_disk", "MiB", disk))
	mem := statTable(fmt.Sprintf("each of the %d children after %s idle", fanOut, idleBeforeMeasure), "MiB")
	mem.Rows = append(mem.Rows,
		statRow("guest RAM mapping: Private_Dirty (this child alone)", sPriv),
		statRow("guest RAM mapping: Rss (shared pages included)", sGRss),
		statRow("QEMU's own (process Rss − guest RAM Rss)", sOwn),
		statRow("QEMU process Rss", sRss),
		statRow("disk: qcow2 files in sandboxes/<id>/, allocated", sDisk),
	)
	r.Tables = append(r.Tables, mem)
	r.addGoal(goal{Name: "idle child's private guest memory (worst child)", Target: fmt.Sprintf("≤ %d MiB", childPrivateGoalMiB),
		Value: sPriv.Max, Unit: "MiB", Met: sPriv.Max <= childPrivateGoalMiB})
	r.addGoal(goal{Name: "disk added per child (worst child)", Target: fmt.Sprintf("≤ %d MiB", childDiskGoalMiB),
		Value: sDisk.Max, Unit: "MiB", Met: sDisk.Max <= childDiskGoalMiB})
	if err := e.deleteAll(ctx, children); err != nil {
		return nil, err
	}
	children = nil

	// 4. Snapshot create and restore on the same parent.
	var create, restore, restoreExec []float64
	for i := range min(e.opts.runs, sandbox.MaxSnapshots) {
		start := time.Now()
		snp, err := e.client.CreateSnapshot(ctx, parent, zeish.CreateSnapshotRequest{Name: fmt.Sprintf("bench-%d", i)})
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", parent, err)
		}
		created := time.Since(start)
		start = time.Now()
		res, err := e.client.RestoreSnapshot(ctx, snp.ID, zeish.Wait())
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", snp.ID, err)
		}
		if res.Sandbox.State != sandbox.StateRunning {
			return nil, fmt.Errorf("restore %s: sandbox is %s: %s", snp.ID, res.Sandbox.State, res.Sandbox.StateReason)
		}
		restored := time.Since(start)
		if err := e.firstExec(ctx, parent); err != nil {
			return nil, fmt.Errorf("after restore: %w", err)
		}
		e.log.Info("snapshot", "run", i, "create_ms", created.Milliseconds(), "restore_ms", restored.Milliseconds())
		create, restore = append(create, ms(created)), append(restore, ms(restored))
		restoreExec = append(restoreExec, ms(time.Since(start)))
	}
	snap := statTable(fmt.Sprintf("snapshots of a running %d MiB sandbox", fanOutParentMiB), "ms")
	snap.Rows = append(snap.Rows,
		statRow("create snapshot", r.add(newSeries("snapshot_create", "ms", create))),
		statRow("restore (wait=true)", r.add(newSeries("snapshot_restore", "ms", restore))),
		statRow("restore → first exec", r.add(newSeries("snapshot_restore_to_first_exec", "ms", restoreExec))),
	)
	r.Tables = append(r.Tables, snap)
	r.Notes = append(r.Notes,
		"fork → first exec: the clone call (count 1, wait=true) until `true` returned in the child (access token, connect, exec)",
		"cold reference: each parent's own create → first exec (one sample per size); `-only cold` gives more runs at -memory",
		"memory from /proc/PID/smaps of each child's QEMU: the guest-RAM mapping is the one of the mem-path= file on its command line",
	)
	return r, nil
}

// pausedBaseline measures re-forks of a paused baseline of memMiB.
func (e *benchEnv) pausedBaseline(ctx context.Context, r *report, memMiB int, parents *[]string) error {
	id, _, err := e.createAndExec(ctx, memMiB)
	if id != "" {
		*parents = append(*parents, id)
	}
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	kids, _, _, _, err := e.cloneAndExec(ctx, id, 1) // the baseline has been forked and ran on
	if derr := e.deleteAll(ctx, kids); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	if _, err := e.client.PauseSandbox(ctx, id); err != nil {
		return err
	}
	var pauses, forks []float64
	for i := 0; i <= e.opts.runs; i++ {
		kids, pause, total, _, err := e.cloneAndExec(ctx, id, 1)
		if derr := e.deleteAll(ctx, kids); derr != nil && err == nil {
			err = derr
		}
		if err != nil {
			return err
		}
		e.log.Info("paused baseline fork", "run", i, "pause_ms", pause, "fork_to_exec_ms", total.Milliseconds())
		pauses, forks = append(pauses, pause), append(forks, ms(total))
	}
	first := r.add(newSeries("paused_baseline_first_pause_ms", "ms", pauses[:1]))
	again := r.add(newSeries("paused_baseline_again_pause_ms", "ms", pauses[1:]))
	againFork := r.add(newSeries("paused_baseline_again_fork_to_first_exec", "ms", forks[1:]))
	t := statTable(fmt.Sprintf("fan out again from a paused %d MiB baseline (forked and run on before)", memMiB), "ms")
	t.Rows = append(t.Rows,
		statRow("first fork after pausing: parent pause_ms (promotion)", first),
		statRow("later forks: parent pause_ms (the image is reused)", again),
		statRow("later forks: fork → first exec", againFork),
	)
	r.Tables = append(r.Tables, t)
	return nil
}
