// Command bench measures zeish end to end and prints tables (markdown, or
// JSON with -o json). It starts its own zeishd on a temporary data dir and a
// free loopback port, boots real VMs through the public Go SDK, and removes
// every sandbox, process and file it made when it ends, Ctrl-C included.
//
// Each section lives in its own file and registers itself in init:
//
//	cold  create → first exec through the API next to a raw QEMU boot
//	fork    clone pause, fork → first exec, fan-out, child memory and disk,
//	        snapshots
//	refork  re-fork of a child, at depth 10, snapshot of a child: live
//	        capture next to the stopped promotion (ZEISH_FORK_PROMOTION),
//	        by RAM size (-refork-sizes, -refork-modes, -refork-depth)
//	tbsize  TCG translation cache sizes (-tb-sizes): boot, CPU-bound exec,
//	        QEMU's own memory per VM
//	api     control-plane latency of get and list with many sandboxes in the database
//	cluster what a control plane in front of a node agent adds to create and fork
//	density (only with -only density) 100 live children of one 1 GiB
//	        sandbox, all answering exec: each child's unique cost (PSS)
//	        and idle CPU, by the children's tb-size
//	net     what networking adds to create → first exec and fork → first
//	        exec (network vs enabled: false on one zeishd in a NetLab),
//	        iperf3 guest↔uplink vs plain QEMU on a TAP
//	images  (only with -only images) images in a shared S3 store
//	        (versitygw, PostgreSQL, a control plane and two node agents on
//	        loopback): a remote fork child's fork → first exec next to a
//	        local child's, a re-fork's upload ÷ its private pages, the pause
//	        with a store ÷ without, creates from a cached template next to
//	        the single binary, a template's first create on a new node
//	        next to cp of its files
//	attack  (only with -only attack) a third account's exec and create
//	        latency, idle and while a silent guest behind a public port is
//	        called by 1,100 clients and another guest floods DNS
//
// Usage:
//
//	go run ./bench [-runs 5] [-only cold,fork] [-memory 256] [-o json] [-bin bin]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// section is one group of measurements.
type section struct {
	name  string
	about string
	run   func(ctx context.Context, e *benchEnv) (*report, error)
	// optIn sections run only when -only names them (long, or heavy on
	// the host).
	optIn bool
}

var sections []section

func register(s section) { sections = append(sections, s) }

type options struct {
	runs   int
	warmup int
	memMiB int
	only   string
	output string
	binDir string
	zlog   string // where zeishd's debug log goes at the end ("": nowhere)
	ready  int    // zeishd's ZEISH_READY_VMS
	// netSkip names parts of the net section to leave out (create, warm,
	// fork, link, iperf): an A/B of a fork's cost needs only the forks.
	netSkip string
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 5, "measured runs of each figure")
	flag.IntVar(&o.warmup, "warmup", 1, "unmeasured runs first (page cache, template load)")
	flag.IntVar(&o.memMiB, "memory", 256, "guest memory in MiB for cold creates and raw boots")
	flag.StringVar(&o.only, "only", "", "comma-separated sections to run (default: all)")
	flag.StringVar(&o.output, "o", "markdown", "output: markdown or json")
	flag.StringVar(&o.binDir, "bin", "", "`dir` with prebuilt zeishd and sandboxd (as make build leaves in bin/); default: build them")
	flag.StringVar(&o.zlog, "zeishd-log", "", "`file` to write zeishd's log to (at debug level, with every step's time) when the bench ends")
	flag.IntVar(&o.ready, "ready-vms", 1, "zeishd's ZEISH_READY_VMS: VMs kept launched and loaded per warm template in use (0: none, every warm create starts a VMM)")
	flag.StringVar(&o.netSkip, "net-skip", "", "comma-separated parts of the net section to leave out: create (cold), warm (warm creates on ready VMs), fork, link, iperf")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench [flags]\n\nsections:\n")
		for _, s := range sections {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-6s %s\n", s.name, s.about)
		}
		fmt.Fprintln(flag.CommandLine.Output(), "\nflags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// The first signal cancels the runs; later ones are swallowed so the
	// cleanup (deleting VMs through zeishd) is not cut short.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		log.Error("bench", "err", err)
		os.Exit(1)
	}
}

func pick(only string) ([]section, error) {
	if only == "" {
		return slices.DeleteFunc(slices.Clone(sections), func(s section) bool { return s.optIn }), nil
	}
	var out []section
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(sections, func(s section) bool { return s.name == name })
		if i < 0 {
			var known []string
			for _, s := range sections {
				known = append(known, s.name)
			}
			hint := ""
			if name == "fork" {
				hint = " (build with -tags forkbench)"
			}
			return nil, fmt.Errorf("unknown section %q%s; known: %s", name, hint, strings.Join(known, ", "))
		}
		out = append(out, sections[i])
	}
	return out, nil
}

func run(ctx context.Context, log *slog.Logger, o options) (err error) {
	if o.runs < 1 || o.warmup < 0 || o.memMiB < 64 {
		return errors.New("want -runs ≥ 1, -warmup ≥ 0, -memory ≥ 64")
	}
	if o.output != "markdown" && o.output != "json" {
		return fmt.Errorf("-o %q: want markdown or json", o.output)
	}
	chosen, err := pick(o.only)
	if err != nil {
		return err
	}
	e := &benchEnv{log: log, opts: o, seen: map[string]bool{}}
	defer func() {
		if cerr := e.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	if err := setupEnv(ctx, e); err != nil {
		return err
	}
	began := time.Now()
	var reports []*report
	for _, s := range chosen {
		log.Info("section", "name", s.name)
		r, err := s.run(ctx, e)
		if err != nil {
			// What the earlier sections measured is still worth printing.
			if len(reports) > 0 && o.output == "markdown" {
				writeMarkdown(os.Stdout, reports)
			}
			return fmt.Errorf("section %s: %w", s.name, err)
		}
		reports = append(reports, r)
	}
	host, _ := os.Hostname()
	envInfo := map[string]any{
		"host": host, "cpus": runtime.NumCPU(), "accel": e.accel, "template": e.tpl.Dir,
		"kernel": e.tpl.KernelRelease, "kernel_args": e.tpl.KernelArgs, "memory_mib": o.memMiB,
		"runs": o.runs, "warmup": o.warmup, "took_s": time.Since(began).Seconds(),
	}
	if o.output == "json" {
		return writeJSON(os.Stdout, envInfo, reports)
	}
	fmt.Printf("# zeish bench\n\nhost %s, %d CPUs, accel %s, kernel %s, %d runs after %d warm-up, took %s\n",
		host, runtime.NumCPU(), e.accel, e.tpl.KernelRelease, o.runs, o.warmup, time.Since(began).Round(time.Second))
	writeMarkdown(os.Stdout, reports)
	return nil
}
