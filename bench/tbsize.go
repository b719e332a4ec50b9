package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name:  "tbsize",
		about: "TCG translation cache size (ZEISH_TCG_TB_MIB): cold create → first exec, a CPU-bound exec, QEMU's own memory per idle VM",
		run:   runTBSize,
	})
	flag.StringVar(&tbSizesFlag, "tb-sizes", "128,16", "tbsize: translation cache sizes in MiB to compare")
}

var tbSizesFlag string

// cpuScript keeps a guest's CPU busy in many code paths for a while (busybox
// sh, awk, md5sum): a small translation cache shows as retranslation here.
const cpuScript = "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; seq 1 20000 | awk '{s+=$1} END {print s}' >/dev/null; head -c 3000000 /dev/zero | md5sum >/dev/null"

func runTBSize(ctx context.Context, e *benchEnv) (*report, error) {
	r := &report{Section: "tbsize", Title: fmt.Sprintf("TCG translation cache (%s)", e.accel)}
	if e.accel != "tcg" {
		r.Notes = append(r.Notes, "not TCG: there is no translation cache")
		return r, nil
	}
	t := &table{Title: "by tb-size (256 MiB guests; medians)", Header: []string{"tb-size MiB", "cold create → first exec ms",
		"CPU-bound exec ms", "idle parent: QEMU's own MiB", "idle child: QEMU's own MiB", "idle child: guest Private_Dirty MiB"}}
	for _, f := range strings.Split(tbSizesFlag, ",") {
		tb, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || tb < 0 {
			return nil, fmt.Errorf("-tb-sizes %q", tbSizesFlag)
		}
		// Its children get the same size: this section compares one size for all.
		if err := e.restartWith(ctx, "ZEISH_TCG_TB_MIB="+strconv.Itoa(tb), "ZEISH_TCG_CLONE_TB_MIB="+strconv.Itoa(tb)); err != nil {
			return nil, err
		}
		var colds, cpu []float64
		var ids []string
		for i := range e.opts.runs {
			id, cold, err := e.createAndExec(ctx, 256)
			if id != "" {
				ids = append(ids, id)
			}
			if err != nil {
				return nil, errors2(err, e.deleteAll(ctx, ids))
			}
			colds = append(colds, ms(cold.Total))
			conn, err := e.client.Connect(ctx, id)
			if err != nil {
				return nil, errors2(err, e.deleteAll(ctx, ids))
			}
			start := time.Now()
			if res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{"sh", "-c", cpuScript}}, nil, nil); err != nil || res.ExitCode != 0 {
				return nil, errors2(fmt.Errorf("cpu exec: %v %+v", err, res), e.deleteAll(ctx, ids))
			}
			cpu = append(cpu, ms(time.Since(start)))
			e.log.Info("tbsize", "tb_mib", tb, "run", i, "cold_ms", colds[len(colds)-1], "cpu_ms", cpu[len(cpu)-1])
			if i < e.opts.runs-1 {
				if err := e.deleteAll(ctx, ids); err != nil {
					return nil, err
				}
				ids = nil
			}
		}
		parent := ids[0]
		time.Sleep(idleBeforeMeasure)
		var own [2]float64
		var private float64
		// The parent before it is forked: its RAM file is then the image's, under another name.
		if pid, err := e.sandboxPID(parent); err != nil {
			return nil, errors2(err, e.deleteAll(ctx, ids))
		} else if m, err := qemuMemory(pid); err != nil {
			return nil, errors2(err, e.deleteAll(ctx, ids))
		} else {
			own[0] = toMiB(m.QEMUOwn)
		}
		kid, _, _, err := e.forkOnce(ctx, parent)
		if kid != "" {
			ids = append(ids, kid)
		}
		if err != nil {
			return nil, errors2(err, e.deleteAll(ctx, ids))
		}
		time.Sleep(idleBeforeMeasure)
		pid, err := e.sandboxPID(kid)
		if err != nil {
			return nil, errors2(err, e.deleteAll(ctx, ids))
		}
		m, err := qemuMemory(pid)
		if err != nil {
			return nil, errors2(err, e.deleteAll(ctx, ids))
		}
		own[1], private = toMiB(m.QEMUOwn), toMiB(m.GuestPrivateDirty)
		e.log.Info("tbsize memory", "tb_mib", tb, "parent_own_mib", own[0], "child_own_mib", own[1], "child_private_mib", private)
		if err := e.deleteAll(ctx, ids); err != nil {
			return nil, err
		}
		tag := fmt.Sprintf("tb%d", tb)
		sc := r.add(newSeries("cold_create_to_first_exec_"+tag, "ms", colds))
		scpu := r.add(newSeries("cpu_exec_"+tag, "ms", cpu))
		r.add(newSeries("idle_parent_qemu_own_"+tag, "MiB", own[:1]))
		r.add(newSeries("idle_child_qemu_own_"+tag, "MiB", own[1:]))
		t.Rows = append(t.Rows, []string{strconv.Itoa(tb), fmtNum(sc.Median), fmtNum(scpu.Median), fmtNum(own[0]), fmtNum(own[1]), fmtNum(private)})
	}
	r.Tables = append(r.Tables, t)
	r.Notes = append(r.Notes, "QEMU's own: process Rss minus the guest-RAM mapping's Rss (TCG cache, heap, libraries)")
	return r, nil
}
