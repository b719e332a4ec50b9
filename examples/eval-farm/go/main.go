// Command eval-farm shows zeish's core workflow with the Go SDK: prepare an
// environment once, snapshot it, fork it into N copies that carry on from the
// same point, run one trial per copy in parallel, and collect the results.
//
//	export ZEISH_API_URL=http://127.0.0.1:7420/api/v1   # the default
//	export ZEISH_API_KEY=…                              # else zeishd's admin.key
//	go run ./examples/eval-farm/go -n 5
//
// The baseline sandbox (and its "warm" snapshot) is kept for the next run
// unless -keep=false; the clones are always deleted.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// The "installed" part of the environment: a data file and a scorer that a
// warm-up run turns into a model file every trial then reads. A real farm
// would install packages and load a model here; the point is that the work
// happens once, before the fork.
const (
	dataFile   = "/root/eval/data.txt"
	scorerFile = "/root/eval/score.sh"
	scorer     = `#!/bin/sh
# score.sh warm: build the "model" from the data once.
# score.sh trial N: score trial N against the model.
set -e
cd /root/eval
case "$1" in
warm)
	sum=0
	for v in $(cat data.txt); do sum=$((sum + v)); done
	echo "$sum" > model
	echo "warmed: model=$sum"
	;;
trial)
	echo "trial $2 on $(hostname)"
	model=$(cat model)
	# Each clone has its own reseeded RNG, so the noise differs per clone.
	noise=$(( $(od -An -N2 -tu2 /dev/urandom) % 10 ))
	echo "score=$(( (model * ($2 + 1) + noise) % 100 ))"
	;;
*)
	echo "usage: $0 warm | trial N" >&2
	exit 2
	;;
esac
`
)

func main() {
	n := flag.Int("n", 3, "number of clones, one trial each (1-16)")
	keep := flag.Bool("keep", true, "keep the baseline sandbox and its snapshot after the run")
	template := flag.String("template", "base", "template of the baseline sandbox")
	memory := flag.Int("memory-mib", 256, "memory of the baseline (and so of every clone), in MiB")
	flag.Parse()
	if *n < 1 || *n > 16 {
		fmt.Fprintln(os.Stderr, "eval-farm: -n must be between 1 and 16")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *keep, *template, *memory); err != nil {
		fmt.Fprintf(os.Stderr, "eval-farm: %v\n", err)
		os.Exit(1)
	}
}

// result is one trial's row in the table.
type result struct {
	index       int
	sandbox     zeish.Sandbox
	firstOutput time.Duration // from the exec call to the first stdout byte
	total       time.Duration
	exitCode    int
	score       string
	err         error
}

func run(ctx context.Context, n int, keep bool, template string, memoryMiB int) error {
	client, err := zeish.NewClientFromEnv(zeish.WithUserAgent("eval-farm/" + zeish.Version))
	if err != nil {
		return err
	}
	// Cleanup runs even when ctx was cancelled by ^C.
	cleanupCtx := context.WithoutCancel(ctx)

	start := time.Now()
	baseline, err := client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: template, MemoryMiB: memoryMiB}, zeish.Wait())
	if err != nil {
		return fmt.Errorf("creating the baseline: %w", err)
	}
	if !keep {
		defer deleteAll(cleanupCtx, client, []zeish.Sandbox{baseline})
	}
	if baseline.State != sandbox.StateRunning {
		if baseline, err = client.WaitForState(ctx, baseline.ID, sandbox.StateRunning); err != nil {
			return fmt.Errorf("baseline %s: %w", baseline.ID, err)
		}
	}
	fmt.Printf("baseline %s (%s) running after %v\n", baseline.Name, baseline.ID, since(start))

	// Install and warm up once.
	conn, err := client.Connect(ctx, baseline.ID)
	if err != nil {
		return err
	}
	var data strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintln(&data, i*i)
	}
	if _, err := conn.WriteFile(ctx, dataFile, strings.NewReader(data.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", dataFile, err)
	}
	if _, err := conn.WriteFile(ctx, scorerFile, strings.NewReader(scorer), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", scorerFile, err)
	}
	var warmOut, warmErr bytes.Buffer
	res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{scorerFile, "warm"}}, &warmOut, &warmErr)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("warm-up exited %d: %s", res.ExitCode, strings.TrimSpace(warmErr.String()))
	}
	fmt.Printf("warm-up: %s\n", strings.TrimSpace(warmOut.String()))

	snap, err := client.CreateSnapshot(ctx, baseline.ID, zeish.CreateSnapshotRequest{
		Name: "warm-" + time.Now().UTC().Format("20060102-150405")})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	fmt.Printf("snapshot %s (%s), restore it with `zeishctl snapshots restore %s`\n", snap.Name, snap.ID, snap.ID)

	forkStart := time.Now()
	fork, err := client.CloneSandbox(ctx, baseline.ID, zeish.CloneRequest{Name: baseline.Name + "-trial", Count: n}, zeish.Wait())
	// Whatever came back is deleted at the end, even after a failure.
	defer deleteAll(cleanupCtx, client, fork.Sandboxes)
	if err != nil {
		return fmt.Errorf("cloning: %w", err)
	}
	fmt.Printf("forked %d clones in %v; the baseline was paused %d ms\n\n", len(fork.Sandboxes), since(forkStart), fork.PauseMS)

	results := make([]result, len(fork.Sandboxes))
	var wg sync.WaitGroup
	for i, sb := range fork.Sandboxes {
		wg.Go(func() { results[i] = trial(ctx, client, i, sb) })
	}
	wg.Wait()

	printTable(results, fork.PauseMS)
	var failed []error
	for _, r := range results {
		if r.err != nil {
			failed = append(failed, fmt.Errorf("trial %d in %s: %w", r.index, r.sandbox.ID, r.err))
		} else if r.exitCode != 0 {
			failed = append(failed, fmt.Errorf("trial %d in %s exited %d", r.index, r.sandbox.ID, r.exitCode))
		}
	}
	if keep {
		fmt.Printf("\nkept baseline %s (%s) and snapshot %s; delete with `zeishctl sandboxes delete %s`\n",
			baseline.Name, baseline.ID, snap.ID, baseline.ID)
	}
	return errors.Join(failed...)
}

var scoreLine = regexp.MustCompile(`(?m)^score=(\S+)$`)

// trial runs one trial in a clone and times it.
func trial(ctx context.Context, client *zeish.Client, index int, sb zeish.Sandbox) result {
	r := result{index: index, sandbox: sb}
	if sb.State != sandbox.StateRunning {
		r.err = fmt.Errorf("clone is %s: %s", sb.State, sb.StateReason)
		return r
	}
	conn, err := client.Connect(ctx, sb.ID)
	if err != nil {
		r.err = err
		return r
	}
	start := time.Now()
	stdout := &firstByteWriter{start: start}
	var stderr bytes.Buffer
	res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{scorerFile, "trial", strconv.Itoa(index)},
		TimeoutSeconds: 120}, stdout, &stderr)
	r.total = time.Since(start)
	if err != nil {
		r.err = err
		return r
	}
	r.firstOutput, r.exitCode = stdout.first, res.ExitCode
	if m := scoreLine.FindStringSubmatch(stdout.buf.String()); m != nil {
		r.score = m[1]
	} else {
		r.score = "-"
	}
	return r
}

// firstByteWriter collects output and notes when its first byte arrived.
type firstByteWriter struct {
	start time.Time
	first time.Duration
	buf   bytes.Buffer
}

func (w *firstByteWriter) Write(p []byte) (int, error) {
	if w.buf.Len() == 0 && len(p) > 0 {
		w.first = time.Since(w.start)
	}
	return w.buf.Write(p)
}

func printTable(results []result, pauseMS int64) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TRIAL\tSANDBOX\tNAME\tFORK PAUSE\tFIRST OUTPUT\tTOTAL\tEXIT\tSCORE")
	for _, r := range results {
		exit, score := strconv.Itoa(r.exitCode), r.score
		if r.err != nil {
			exit, score = "error", r.err.Error()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%dms\t%v\t%v\t%s\t%s\n", r.index, r.sandbox.ID, r.sandbox.Name, pauseMS,
			r.firstOutput.Round(time.Millisecond), r.total.Round(time.Millisecond), exit, score)
	}
	tw.Flush()
}

// deleteAll deletes sandboxes in parallel and waits until they are gone.
func deleteAll(ctx context.Context, client *zeish.Client, sandboxes []zeish.Sandbox) {
	var wg sync.WaitGroup
	for _, sb := range sandboxes {
		wg.Go(func() {
			if _, err := client.DeleteSandbox(ctx, sb.ID, zeish.Wait()); err != nil {
				fmt.Fprintf(os.Stderr, "eval-farm: deleting %s: %v\n", sb.ID, err)
				return
			}
			fmt.Printf("deleted %s (%s)\n", sb.Name, sb.ID)
		})
	}
	wg.Wait()
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }
