package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name:  "cold",
		about: "cold create → first exec through the API, next to raw QEMU boot-to-init of the same files",
		run:   runCold,
	})
}

// coldGoalPct is the target: our overhead over a bare QEMU boot of
// the same kernel, initrd and disk stays within this share of that boot.
const coldGoalPct = 20

// smallVCPUs and smallDiskMiB are the "small" preset that an API create
// without a size gets; raw boots use the same so both boot the same machine.
const (
	smallVCPUs   = 1
	smallDiskMiB = 2048
)

// coldStart is one create → first exec through the public API.
type coldStart struct {
	Create    time.Duration // CreateSandbox with wait=true
	FirstExec time.Duration // Connect (access token) + Exec `true`
	Total     time.Duration
}

// createAndExec creates a sandbox with memMiB of RAM, waits for it, connects
// and runs `true`. The sandbox is returned (and tracked) even on a failed
// exec, so the caller can delete it.
func (e *benchEnv) createAndExec(ctx context.Context, memMiB int) (string, coldStart, error) {
	id, wait, total, err := e.createAndExecOn(ctx, e.client, zeish.CreateSandboxRequest{MemoryMiB: memMiB})
	if err != nil {
		return id, coldStart{}, err
	}
	return id, coldStart{Create: wait, FirstExec: total - wait, Total: total}, nil
}

// firstExec connects to a sandbox and runs `true`, as a user's first command.
func (e *benchEnv) firstExec(ctx context.Context, id string) error {
	return firstExecOn(ctx, e.client, id)
}

// firstExecOn is firstExec through the zeishd behind c.
func firstExecOn(ctx context.Context, c *zeish.Client, id string) error {
	conn, err := c.Connect(ctx, id)
	if err != nil {
		return fmt.Errorf("connect %s: %w", id, err)
	}
	res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{"true"}}, nil, nil)
	if err != nil {
		return fmt.Errorf("exec in %s: %w", id, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("exec `true` in %s: exit %d", id, res.ExitCode)
	}
	return nil
}

func runCold(ctx context.Context, e *benchEnv) (*report, error) {
	mem := e.opts.memMiB
	r := &report{Section: "cold", Title: fmt.Sprintf("Cold create → first exec vs raw QEMU boot (%d MiB, %d vCPU, %s)", mem, smallVCPUs, e.accel)}
	var create, first, total, rawInit, rawFirst []float64
	for i := -e.opts.warmup; i < e.opts.runs; i++ {
		warm := i < 0
		// Alternate which goes first so drift on a shared host hits both.
		order := []bool{i%2 == 0, i%2 != 0}
		for _, api := range order {
			if api {
				id, c, err := e.createAndExec(ctx, mem)
				if id != "" {
					if derr := e.deleteSandbox(ctx, id); derr != nil && err == nil {
						err = fmt.Errorf("delete %s: %w", id, derr)
					}
				}
				if err != nil {
					return nil, err
				}
				e.log.Info("cold create", "run", i, "warmup", warm, "create_ms", c.Create.Milliseconds(), "first_exec_ms", c.FirstExec.Milliseconds(), "total_ms", c.Total.Milliseconds())
				if !warm {
					create, first, total = append(create, ms(c.Create)), append(first, ms(c.FirstExec)), append(total, ms(c.Total))
				}
			} else {
				b, err := e.bootRaw(ctx, mem, smallVCPUs, smallDiskMiB)
				if err != nil {
					return nil, fmt.Errorf("raw boot: %w", err)
				}
				e.log.Info("raw boot", "run", i, "warmup", warm, "to_init_ms", b.ToInit.Milliseconds(), "first_output_ms", b.FirstOutput.Milliseconds())
				if !warm {
					rawInit, rawFirst = append(rawInit, ms(b.ToInit)), append(rawFirst, ms(b.FirstOutput))
				}
			}
		}
	}
	sTotal := r.add(newSeries("api_create_to_first_exec", "ms", total))
	sCreate := r.add(newSeries("api_create_wait", "ms", create))
	sFirst := r.add(newSeries("api_connect_and_exec", "ms", first))
	sRaw := r.add(newSeries("raw_qemu_boot_to_init", "ms", rawInit))
	sRawFirst := r.add(newSeries("raw_qemu_first_console_output", "ms", rawFirst))

	t := statTable("", "ms")
	t.Rows = append(t.Rows,
		statRow("create → first exec (API: create wait=true, connect, exec `true`)", sTotal),
		statRow("  of which create (wait=true)", sCreate),
		statRow("  of which connect + exec `true`", sFirst),
		statRow("raw QEMU: exec → init's first console line", sRaw),
	)
	if slices.EqualFunc(rawInit, rawFirst, func(a, b float64) bool { return a-b < 1 }) {
		r.Notes = append(r.Notes, "in every raw boot init's line was the first console output: the kernel prints nothing with `quiet loglevel=1`")
	} else {
		t.Rows = append(t.Rows, statRow("raw QEMU: exec → first console output", sRawFirst))
	}
	overhead := sTotal.Median - sRaw.Median
	pct := 100 * overhead / sRaw.Median
	ratio := sTotal.Median / sRaw.Median
	sum := &table{Header: []string{"medians", "value"}}
	sum.Rows = [][]string{
		{"ratio create→first exec ÷ raw boot-to-init", fmtNum(ratio) + "×"},
		{"overhead (difference)", fmtNum(overhead) + " ms"},
		{"overhead, % of raw boot", fmtNum(pct) + " %"},
	}
	r.Tables = append(r.Tables, t, sum)
	r.addGoal(goal{Name: "overhead of create → first exec over raw boot-to-init", Target: fmt.Sprintf("≤ %d %% of raw", coldGoalPct),
		Value: pct, Unit: "%", Met: pct <= coldGoalPct})
	r.Notes = append(r.Notes,
		fmt.Sprintf("runs: %d measured after %d warm-up; medians compared; both boot the same kernel, initrd (%s) and a fresh qcow2 overlay of the same base disk", e.opts.runs, e.opts.warmup, e.tpl.Dir),
		"raw QEMU stops at init's first console line (`component=init`, sandboxd as PID 1 after switch_root); the API path goes on to the agent handshake, guest configuration, an access token and an exec",
	)
	return r, nil
}
