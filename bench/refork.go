package main

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name:  "refork",
		about: "re-fork of a child, at depth 10, snapshot of a child: live capture next to the stopped promotion, by RAM size; idle child memory",
		run:   runRefork,
	})
	flag.StringVar(&reforkSizesFlag, "refork-sizes", "256,1024", "refork: guest sizes in MiB")
	flag.StringVar(&reforkModesFlag, "refork-modes", "live,migrate", "refork: promotion modes to compare: live (a VM started from an image captured by its private pages when it holds ≤ 32 MiB of them, else migrated), migrate (every live capture a migration: ZEISH_DELTA_MAX_MIB=0), live-serial (live with the receiver launched only once the disk swap is prepared, as before: ZEISH_LIVE_PREP=serial), live-punch (live without keeping the source's image inflated: ZEISH_FORK_INFLATE=off), stopped (ZEISH_FORK_PROMOTION=stopped); each may add +ZEISH_NAME=VALUE settings")
	flag.IntVar(&reforkFanoutFlag, "refork-fanout", 16, "refork: children of one re-fork call (at the smallest size; 0 skips)")
	flag.IntVar(&reforkDepthFlag, "refork-depth", 10, "refork: depth of the chain (at the smallest size)")
}

var (
	reforkSizesFlag  string
	reforkModesFlag  string
	reforkDepthFlag  int
	reforkFanoutFlag int
)

// reforkEnv is the zeishd settings of a -refork-modes entry: a mode of
// reforkModeEnv, optionally followed by +NAME=VALUE settings of its own
// (live+ZEISH_LIVE_DOWNTIME_MS=10).
func reforkEnv(mode string) ([]string, error) {
	base, extra, _ := strings.Cut(mode, "+")
	env, ok := reforkModeEnv[base]
	if !ok {
		return nil, fmt.Errorf("-refork-modes: %q is not live, migrate, live-serial, live-punch or stopped", base)
	}
	env = slices.Clone(env)
	if extra != "" {
		for _, kv := range strings.Split(extra, "+") {
			if name, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(name, "ZEISH_") {
				return nil, fmt.Errorf("-refork-modes %q: %q is not a ZEISH_NAME=VALUE setting", mode, kv)
			}
			env = append(env, kv)
		}
	}
	return env, nil
}

// reforkModeEnv is the zeishd settings of each -refork-modes base mode.
var reforkModeEnv = map[string][]string{
	"live": {"ZEISH_FORK_PROMOTION=live", "ZEISH_FORK_INFLATE=on", "ZEISH_LIVE_DOWNTIME_MS=5"},
	// migrate: every live capture a migration into a receiver, as before
	// captures by private pages (vmm/qemu/delta.go).
	"migrate":    {"ZEISH_FORK_PROMOTION=live", "ZEISH_FORK_INFLATE=on", "ZEISH_LIVE_DOWNTIME_MS=5", "ZEISH_DELTA_MAX_MIB=0"},
	"live-punch": {"ZEISH_FORK_PROMOTION=live", "ZEISH_FORK_INFLATE=off", "ZEISH_LIVE_DOWNTIME_MS=5"},
	"stopped":    {"ZEISH_FORK_PROMOTION=stopped", "ZEISH_FORK_INFLATE=on", "ZEISH_LIVE_DOWNTIME_MS=5"},
	// live-serial: live as before the re-fork → first exec work: the
	// receiver launched only once the disk swap is prepared.
	"live-serial": {"ZEISH_FORK_PROMOTION=live", "ZEISH_FORK_INFLATE=on", "ZEISH_LIVE_DOWNTIME_MS=5", "ZEISH_LIVE_PREP=serial"},
}

// The targets for re-forks.
const (
	reforkPauseGoalMS    = 100 // pause of every kind of fork and snapshot at 256 MiB
	reforkRatioGoal      = 1.3 // largest size ÷ 256 MiB
	reforkDepthRatioGoal = 1.2 // pause at depth 10 ÷ depth 1
)

// reforkRun is what one mode measured at one size.
type reforkRun struct {
	first, firstExec   []float64 // a fresh parent's first fork: pause, fork → first exec
	refork, reforkExec []float64 // a child forked again
	snap, snapCall     []float64 // a snapshot of a child: pause, call
	deep, deepExec     []float64 // a node at the chain's depth forked
	ranOn, ranOnExec   []float64 // a parent forked again after its first fork
	restored, restExec []float64 // a sandbox started from a snapshot, forked
	fanout, fanoutAll  []float64 // a child forked into fanoutN at once: pause, call → all exec'ed
	fanoutN            int
	parts              map[string][]float64 // live captures' log figures (liveParts), all of this size
	deltaParts         map[string][]float64 // captures by private pages (deltaParts), all of this size
	privateMiB, ownMiB float64              // an idle grandchild (from a re-fork): guest Private_Dirty, QEMU's own
	depth              int
	imageRAMMiB        float64 // image RAM held once the re-forks are done
}

// restartWith restarts zeishd with env settings replacing any of the same names.
func (e *benchEnv) restartWith(ctx context.Context, settings ...string) error {
	if err := e.zeishd.Stop(); err != nil {
		return err
	}
	for _, s := range settings {
		name, _, _ := strings.Cut(s, "=")
		e.zeishd.Env = slices.DeleteFunc(e.zeishd.Env, func(v string) bool { return strings.HasPrefix(v, name+"=") })
		e.zeishd.Env = append(e.zeishd.Env, s)
	}
	return e.zeishd.Start(ctx)
}

// liveParts are the figures of the driver's "vm captured live" log line:
// the pause and its parts (stop → pre-switchover seen, disk swap, last
// pass, completion → resumed: QEMU reactivates every layer of the disk
// chain at cont), the number of qcow2 layers under the source's disk, the
// copy until the image exists, the wait for the source's image to be
// inflated, and the receiver's state save; within the copy, the
// preparation (disk swap and receiver launched) and the migration itself,
// and the image's RAM as written (MiB of non-zero pages).
var liveParts = []string{"pause_ms", "stop_to_seen_ms", "swap_ms", "last_pass_ms", "cont_ms", "chain", "copy_ms", "prepare_ms",
	"inflate_wait_ms", "migrate_ms", "save_ms", "image_mib"}

var liveCaptureRE = regexp.MustCompile(`msg="vm captured live"[^\n]*`)

// deltaParts are the figures of the driver's "vm captured by its private
// pages" log line: the pause and its parts (the private pages' copy, the
// disk swap, the device-state save, cont), the MiB of private pages, the
// preparation (the old image's copy beside the disk swap's) and the whole
// capture, and the image's RAM as written.
var deltaParts = []string{"pause_ms", "pages_ms", "private_mib", "swap_ms", "save_ms", "cont_ms", "prepare_ms", "copy_ms", "image_mib"}

var deltaCaptureRE = regexp.MustCompile(`msg="vm captured by its private pages"[^\n]*`)

// liveCaptureParts collects liveParts from every live capture line in log.
func liveCaptureParts(log string) map[string][]float64 {
	return captureParts(log, liveCaptureRE, liveParts)
}

// captureParts collects the figures keys from every line of log re matches.
func captureParts(log string, re *regexp.Regexp, keys []string) map[string][]float64 {
	out := map[string][]float64{}
	for _, line := range re.FindAllString(log, -1) {
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || !slices.Contains(keys, k) {
				continue
			}
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				out[k] = append(out[k], n)
			}
		}
	}
	return out
}

var captureDoneRE = regexp.MustCompile(`msg="capture done"[^\n]* sandbox=(\S+) [^\n]*pause_ms=(\d+)`)

// capturePauses lists the pauses of id's captures in zeishd's log, oldest first.
func (e *benchEnv) capturePauses(id string) []float64 {
	var out []float64
	for _, m := range captureDoneRE.FindAllStringSubmatch(e.zeishd.Log.String(), -1) {
		if m[1] == id {
			v, _ := strconv.ParseFloat(m[2], 64)
			out = append(out, v)
		}
	}
	return out
}

// newCapturePause waits (briefly: zeishd's output reaches us through a
// pipe) for the log line of id's capture after the had earlier ones.
func (e *benchEnv) newCapturePause(id string, had int) (float64, bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if p := e.capturePauses(id); len(p) > had {
			return p[len(p)-1], true
		}
	}
	return 0, false
}

// forkOnce forks id once and returns the child, the pause and fork → first exec.
func (e *benchEnv) forkOnce(ctx context.Context, id string) (string, float64, float64, error) {
	kids, pause, total, _, err := e.cloneAndExec(ctx, id, 1)
	if err != nil {
		return "", 0, 0, errors2(err, e.deleteAll(ctx, kids))
	}
	return kids[0], pause, ms(total), nil
}

func errors2(err, more error) error {
	if more != nil {
		return fmt.Errorf("%w (and %v)", err, more)
	}
	return err
}

func runRefork(ctx context.Context, e *benchEnv) (*report, error) {
	r := &report{Section: "refork", Title: fmt.Sprintf("Re-fork and snapshot of children: live capture vs stopped promotion (%s)", e.accel)}
	var sizes []int
	for _, f := range strings.Split(reforkSizesFlag, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 64 {
			return nil, fmt.Errorf("-refork-sizes %q: want MiB ≥ 64", reforkSizesFlag)
		}
		sizes = append(sizes, v)
	}
	modes := strings.Split(reforkModesFlag, ",")
	results := map[string]map[int]*reforkRun{}
	for _, mode := range modes {
		env, err := reforkEnv(mode)
		if err != nil {
			return nil, err
		}
		if err := e.restartWith(ctx, env...); err != nil {
			return nil, err
		}
		results[mode] = map[int]*reforkRun{}
		for i, mem := range sizes {
			depth, fanout := 0, 0
			if i == 0 { // the chain at the smallest size, in every mode (its pause is compared)
				depth = reforkDepthFlag
				if mode == modes[0] { // the fan-out: once
					fanout = reforkFanoutFlag
				}
			}
			res, err := e.reforkAt(ctx, mode, mem, depth, fanout)
			if err != nil {
				return nil, fmt.Errorf("%s, %d MiB: %w", mode, mem, err)
			}
			results[mode][mem] = res
		}
	}
	if err := e.restartWith(ctx, reforkModeEnv["live"]...); err != nil {
		return nil, err
	}

	t := &table{Title: "parent pause (STOP → RESUME of the source, ms) and fork → first exec (ms): medians (min–max)",
		Header: []string{"what", "size"}}
	for _, mode := range modes {
		t.Header = append(t.Header, mode+" pause", mode+" → exec")
	}
	cell := func(s []float64) string {
		if len(s) == 0 {
			return "–"
		}
		return fmt.Sprintf("%s (%s–%s)", fmtNum(median(s)), fmtNum(slices.Min(s)), fmtNum(slices.Max(s)))
	}
	rows := []struct {
		key, what   string
		pause, exec func(*reforkRun) []float64
	}{
		{"first", "first fork of a booted parent", func(x *reforkRun) []float64 { return x.first }, func(x *reforkRun) []float64 { return x.firstExec }},
		{"refork", "re-fork of a child", func(x *reforkRun) []float64 { return x.refork }, func(x *reforkRun) []float64 { return x.reforkExec }},
		{"deep", "re-fork at depth N", func(x *reforkRun) []float64 { return x.deep }, func(x *reforkRun) []float64 { return x.deepExec }},
		{"ranon", "fork of a parent that ran on after a fork", func(x *reforkRun) []float64 { return x.ranOn }, func(x *reforkRun) []float64 { return x.ranOnExec }},
		{"restored", "fork of a sandbox started from a snapshot", func(x *reforkRun) []float64 { return x.restored }, func(x *reforkRun) []float64 { return x.restExec }},
		{"fanout", "re-fork of a child into N (pause; call → all exec'ed)", func(x *reforkRun) []float64 { return x.fanout }, func(x *reforkRun) []float64 { return x.fanoutAll }},
		{"snapshot", "snapshot of a child (pause; call)", func(x *reforkRun) []float64 { return x.snap }, func(x *reforkRun) []float64 { return x.snapCall }},
	}
	for _, row := range rows {
		for _, mem := range sizes {
			what := row.what
			if strings.Contains(what, "depth N") {
				if results[modes[0]][mem].depth == 0 {
					continue
				}
				what = strings.Replace(what, "N", strconv.Itoa(results[modes[0]][mem].depth), 1)
			}
			if strings.Contains(what, "into N") {
				if results[modes[0]][mem].fanoutN == 0 {
					continue
				}
				what = strings.Replace(what, "N", strconv.Itoa(results[modes[0]][mem].fanoutN), 1)
			}
			line := []string{what, fmt.Sprintf("%d MiB", mem)}
			for _, mode := range modes {
				x := results[mode][mem]
				line = append(line, cell(row.pause(x)), cell(row.exec(x)))
				tag := fmt.Sprintf("%s_%s_%dmib", mode, row.key, mem)
				r.add(newSeries("pause_"+tag, "ms", row.pause(x)))
				r.add(newSeries("exec_"+tag, "ms", row.exec(x)))
			}
			t.Rows = append(t.Rows, line)
		}
	}
	r.Tables = append(r.Tables, t)

	mem := &table{Title: "an idle grandchild (forked from a child) after 10 s, and image RAM held", Header: []string{"mode", "size",
		"guest Private_Dirty MiB", "QEMU's own MiB", "image RAM in /dev/shm MiB"}}
	for _, mode := range modes {
		for _, size := range sizes {
			x := results[mode][size]
			mem.Rows = append(mem.Rows, []string{mode, fmt.Sprintf("%d MiB", size), fmtNum(x.privateMiB), fmtNum(x.ownMiB), fmtNum(x.imageRAMMiB)})
		}
	}
	r.Tables = append(r.Tables, mem)

	parts := &table{Title: "where live captures' time goes (every live capture at that size, from zeishd's log): medians (max), ms",
		Header: append([]string{"mode", "size", "captures"}, liveParts...)}
	for _, mode := range modes {
		for _, size := range sizes {
			x := results[mode][size]
			n := len(x.parts["pause_ms"])
			if n == 0 {
				continue
			}
			line := []string{mode, fmt.Sprintf("%d MiB", size), strconv.Itoa(n)}
			for _, k := range liveParts {
				line = append(line, fmt.Sprintf("%s (%s)", fmtNum(median(x.parts[k])), fmtNum(slices.Max(x.parts[k]))))
			}
			parts.Rows = append(parts.Rows, line)
		}
	}
	if len(parts.Rows) > 0 {
		r.Tables = append(r.Tables, parts)
	}
	deltas := &table{Title: "where captures by private pages spend their time (every such capture at that size, from zeishd's log): medians (max), ms / MiB",
		Header: append([]string{"mode", "size", "captures"}, deltaParts...)}
	for _, mode := range modes {
		for _, size := range sizes {
			x := results[mode][size]
			n := len(x.deltaParts["pause_ms"])
			if n == 0 {
				continue
			}
			line := []string{mode, fmt.Sprintf("%d MiB", size), strconv.Itoa(n)}
			for _, k := range deltaParts {
				line = append(line, fmt.Sprintf("%s (%s)", fmtNum(median(x.deltaParts[k])), fmtNum(slices.Max(x.deltaParts[k]))))
			}
			deltas.Rows = append(deltas.Rows, line)
		}
	}
	if len(deltas.Rows) > 0 {
		r.Tables = append(r.Tables, deltas)
	}

	// Goals, for the first mode (live, the one zeishd uses, unless told).
	if live := results[modes[0]]; strings.HasPrefix(modes[0], "live") {
		small, large := sizes[0], sizes[len(sizes)-1]
		for _, k := range []struct {
			name string
			get  func(*reforkRun) []float64
		}{{"re-fork of a child", func(x *reforkRun) []float64 { return x.refork }},
			{"fork of a parent that ran on", func(x *reforkRun) []float64 { return x.ranOn }},
			{"fork of a restored sandbox", func(x *reforkRun) []float64 { return x.restored }},
			{"snapshot of a child", func(x *reforkRun) []float64 { return x.snap }}} {
			v := median(k.get(live[small]))
			r.addGoal(goal{Name: fmt.Sprintf("%s: pause, %d MiB", k.name, small), Target: fmt.Sprintf("≤ %d ms", reforkPauseGoalMS),
				Value: v, Unit: "ms", Met: v <= reforkPauseGoalMS})
			if large != small && v > 0 {
				ratio := median(k.get(live[large])) / v
				r.addGoal(goal{Name: fmt.Sprintf("%s: pause %d MiB ÷ %d MiB", k.name, large, small), Target: fmt.Sprintf("≤ %.1f", reforkRatioGoal),
					Value: ratio, Unit: "×", Met: ratio <= reforkRatioGoal})
			}
		}
		if x := live[small]; len(x.deep) > 0 && len(x.refork) > 0 {
			ratio := median(x.deep) / median(x.refork)
			r.addGoal(goal{Name: fmt.Sprintf("pause at depth %d ÷ depth 1, %d MiB", x.depth, small), Target: fmt.Sprintf("≤ %.1f", reforkDepthRatioGoal),
				Value: ratio, Unit: "×", Met: ratio <= reforkDepthRatioGoal})
		}
		for _, size := range sizes {
			if x := live[size]; len(x.reforkExec) > 0 && len(x.firstExec) > 0 {
				ratio := median(x.reforkExec) / median(x.firstExec)
				r.addGoal(goal{Name: fmt.Sprintf("re-fork → first exec ÷ first fork's, %d MiB", size), Target: "≤ 1.2",
					Value: ratio, Unit: "×", Met: ratio <= 1.2})
				ratio = x.reforkExec[0] / median(x.firstExec)
				r.addGoal(goal{Name: fmt.Sprintf("first re-fork of a child (its image not yet inflated) → first exec ÷ first fork's, %d MiB", size), Target: "≤ 1.2",
					Value: ratio, Unit: "×", Met: ratio <= 1.2})
			}
		}
	}
	r.Notes = append(r.Notes,
		"live-punch: live, but the source's image is made sparse again after each capture (the design before inflation), so each capture allocates its holes again",
		"fan-out: one call forking a child into N; → exec is the call until the last child answered",
		"live: a VM started from an image holding ≤ 32 MiB of private pages is captured by them (its image copied by the kernel while it runs, then a pause that writes its private pages over the copy and saves device state without RAM); any other is migrated; migrate: every live capture migrates, its RAM copied into a never-started receiver while it runs (multifd, zero-page detection), paused only to switch over; stopped: the old path, promotion with the guest stopped for the copy, then a capture",
		"pause: the parent's pause_ms from the clone call; for snapshots the same figure from zeishd's `capture done` log line",
		"first fork: a fresh parent each run, the same code in both modes",
	)
	return r, nil
}

// reforkAt measures one mode at one size: first forks of fresh parents,
// re-forks and snapshots of one child, (depth > 0) a chain that deep and
// (fanout > 0) a re-fork into that many children.
func (e *benchEnv) reforkAt(ctx context.Context, mode string, memMiB, depth, fanout int) (_ *reforkRun, err error) {
	x := &reforkRun{depth: depth}
	mark := len(e.zeishd.Log.String())
	defer func() {
		log := e.zeishd.Log.String()[mark:]
		x.parts, x.deltaParts = liveCaptureParts(log), captureParts(log, deltaCaptureRE, deltaParts)
	}()
	var made []string
	defer func() {
		if derr := e.deleteAll(ctx, made); derr != nil && err == nil {
			err = derr
		}
	}()
	var child string
	for i := range e.opts.runs {
		parent, _, err := e.createAndExec(ctx, memMiB)
		if parent != "" {
			made = append(made, parent)
		}
		if err != nil {
			return nil, err
		}
		kid, pause, exec, err := e.forkOnce(ctx, parent)
		if err != nil {
			return nil, err
		}
		made = append(made, kid)
		x.first, x.firstExec = append(x.first, pause), append(x.firstExec, exec)
		e.log.Info("refork: first fork", "mode", mode, "mib", memMiB, "run", i, "pause_ms", pause, "exec_ms", exec)
		if i == 0 {
			child = kid
			continue
		}
		if err := e.deleteAll(ctx, []string{kid, parent}); err != nil {
			return nil, err
		}
		made = made[:len(made)-2]
	}
	var grandchild string
	for i := range e.opts.runs {
		kid, pause, exec, err := e.forkOnce(ctx, child)
		if err != nil {
			return nil, err
		}
		x.refork, x.reforkExec = append(x.refork, pause), append(x.reforkExec, exec)
		e.log.Info("refork: re-fork of a child", "mode", mode, "mib", memMiB, "run", i, "pause_ms", pause, "exec_ms", exec)
		if i == 0 {
			grandchild = kid
			made = append(made, kid)
			continue
		}
		if err := e.deleteSandbox(ctx, kid); err != nil {
			return nil, err
		}
	}
	for i := range e.opts.runs {
		had := len(e.capturePauses(child))
		start := time.Now()
		snp, err := e.client.CreateSnapshot(ctx, child, zeish.CreateSnapshotRequest{Name: fmt.Sprintf("refork-%d", i)})
		if err != nil {
			return nil, fmt.Errorf("snapshot of a child: %w", err)
		}
		call := ms(time.Since(start))
		pause, ok := e.newCapturePause(child, had)
		if !ok {
			return nil, fmt.Errorf("no capture line for %s in zeishd's log", child)
		}
		x.snap, x.snapCall = append(x.snap, pause), append(x.snapCall, call)
		e.log.Info("refork: snapshot of a child", "mode", mode, "mib", memMiB, "run", i, "pause_ms", pause, "call_ms", call)
		if err := e.client.DeleteSnapshot(ctx, snp.ID); err != nil {
			return nil, err
		}
	}
	x.imageRAMMiB = imageRAMMiB(e.dataDir)
	// The first run's parent has run on since its first fork.
	for i := range e.opts.runs {
		kid, pause, exec, err := e.forkOnce(ctx, made[0])
		if err != nil {
			return nil, fmt.Errorf("fork of a parent that ran on: %w", err)
		}
		x.ranOn, x.ranOnExec = append(x.ranOn, pause), append(x.ranOnExec, exec)
		e.log.Info("refork: parent that ran on", "mode", mode, "mib", memMiB, "run", i, "pause_ms", pause, "exec_ms", exec)
		if err := e.deleteSandbox(ctx, kid); err != nil {
			return nil, err
		}
	}
	if err := e.forkRestored(ctx, x, mode, memMiB, child, &made); err != nil {
		return nil, err
	}
	if n := fanout; n > 0 {
		kids, pause, total, _, err := e.cloneAndExec(ctx, child, n)
		if derr := e.deleteAll(ctx, kids); derr != nil && err == nil {
			err = derr
		}
		if err != nil {
			return nil, fmt.Errorf("fan-out of %d: %w", n, err)
		}
		x.fanout, x.fanoutAll, x.fanoutN = []float64{pause}, []float64{ms(total)}, n
		e.log.Info("refork: fan-out", "mode", mode, "mib", memMiB, "children", n, "pause_ms", pause, "all_exec_ms", ms(total))
	}
	// The grandchild idles while the chain grows, then is measured.
	idleSince := time.Now()
	if depth > 1 {
		cur := child
		for d := 2; d <= depth; d++ {
			kid, pause, exec, err := e.forkOnce(ctx, cur)
			if err != nil {
				return nil, fmt.Errorf("chain depth %d: %w", d, err)
			}
			made = append(made, kid)
			e.log.Info("refork: chain", "mode", mode, "mib", memMiB, "depth", d-1, "pause_ms", pause, "exec_ms", exec)
			if cur != child {
				// Deleting the parent harms no descendant; it keeps the host quiet.
				if err := e.deleteSandbox(ctx, cur); err != nil {
					return nil, err
				}
				made = slices.DeleteFunc(made, func(id string) bool { return id == cur })
			}
			cur = kid
		}
		for i := range e.opts.runs {
			kid, pause, exec, err := e.forkOnce(ctx, cur)
			if err != nil {
				return nil, err
			}
			x.deep, x.deepExec = append(x.deep, pause), append(x.deepExec, exec)
			e.log.Info("refork: at depth", "mode", mode, "mib", memMiB, "depth", depth, "run", i, "pause_ms", pause, "exec_ms", exec)
			if err := e.deleteSandbox(ctx, kid); err != nil {
				return nil, err
			}
		}
	}
	if wait := idleBeforeMeasure - time.Since(idleSince); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	pid, err := e.sandboxPID(grandchild)
	if err != nil {
		return nil, err
	}
	m, err := qemuMemory(pid)
	if err != nil {
		return nil, err
	}
	x.privateMiB, x.ownMiB = toMiB(m.GuestPrivateDirty), toMiB(m.QEMUOwn)
	e.log.Info("refork: idle grandchild", "mode", mode, "mib", memMiB, "private_mib", x.privateMiB, "own_mib", x.ownMiB, "image_ram_mib", x.imageRAMMiB)
	return x, nil
}

// forkRestored starts a sandbox from a snapshot of child and forks it.
func (e *benchEnv) forkRestored(ctx context.Context, x *reforkRun, mode string, memMiB int, child string, made *[]string) error {
	snp, err := e.client.CreateSnapshot(ctx, child, zeish.CreateSnapshotRequest{Name: "refork-restore"})
	if err != nil {
		return fmt.Errorf("snapshot to restore: %w", err)
	}
	defer e.client.DeleteSnapshot(context.WithoutCancel(ctx), snp.ID)
	resp, err := e.client.CloneSnapshot(ctx, child, snp.ID, zeish.CloneRequest{Count: 1}, zeish.Wait())
	for _, c := range resp.Sandboxes {
		e.track(c.ID)
		*made = append(*made, c.ID)
	}
	if err != nil {
		return fmt.Errorf("start from snapshot: %w", err)
	}
	if len(resp.Sandboxes) != 1 {
		return fmt.Errorf("start from snapshot: got %d sandboxes", len(resp.Sandboxes))
	}
	restored := resp.Sandboxes[0].ID
	if err := e.firstExec(ctx, restored); err != nil {
		return err
	}
	for i := range e.opts.runs {
		kid, pause, exec, err := e.forkOnce(ctx, restored)
		if err != nil {
			return fmt.Errorf("fork of a restored sandbox: %w", err)
		}
		x.restored, x.restExec = append(x.restored, pause), append(x.restExec, exec)
		e.log.Info("refork: restored sandbox", "mode", mode, "mib", memMiB, "run", i, "pause_ms", pause, "exec_ms", exec)
		if err := e.deleteSandbox(ctx, kid); err != nil {
			return err
		}
	}
	return nil
}
