package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name:  "net",
		about: "what networking adds to create → first exec and fork → first exec (network vs enabled: false, one zeishd in a NetLab), iperf3 guest↔uplink vs plain QEMU on a TAP",
		run:   runNet,
	})
}

// The net section never touches the host's network: the networked zeishd
// and the plain QEMU run in a NetLab's node namespace, whose only way out is
// the lab's own internet (198.18.0.0/15).

// netGoalMS is the target for what networking adds to a create and
// to a fork (median).
const netGoalMS = 20

// Rates the creates ask for: the node's defaults (cmd/zeishd), so their
// firewall carries the policers a default sandbox has; the throughput
// sandbox asks for none, and this node caps nothing by default.
const (
	benchRateBytes   = 12_500_000
	benchRatePackets = 20_000
)

// raw TAP of the plain-QEMU baseline, routed (not masqueraded) to the lab.
const (
	rawTAP     = "zb0"
	rawGateway = "10.99.0.1"
	rawGuest   = "10.99.0.2"
	rawNet     = "10.99.0.0/30"
	rawMAC     = "52:54:00:12:34:56" // QEMU's default
)

func runNet(ctx context.Context, e *benchEnv) (_ *report, err error) {
	mem := e.opts.memMiB
	r := &report{Section: "net", Title: fmt.Sprintf("Networking: cost on create and fork, throughput (%d MiB, %s)", mem, e.accel)}
	lab, err := sealedLab()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, lab.Close()) }()
	skip := func(part string) bool { return slices.Contains(strings.Split(e.opts.netSkip, ","), part) }
	var iperf []guestFile
	if !skip("iperf") {
		if iperf, err = iperfBundle(); err != nil {
			return nil, err
		}
	}
	c, z, stop, err := e.labServer(ctx, lab)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop()) }()

	// One zeishd, one template: a sandbox with a network card (the node's
	// default caps, so its firewall carries the policers a default sandbox
	// has) and one with network: {enabled: false}, alternating which goes
	// first so load drift hits both.
	no := false
	reqs := map[bool]*api.NetworkRequest{
		true:  {RateBytes: benchRateBytes, RatePackets: benchRatePackets},
		false: {Enabled: &no},
	}
	del := func(id string) error { return deleteSandboxOn(ctx, c, id) }
	// create makes a sandbox and runs its first exec; wait is the create
	// call (wait=true) alone, total the whole create → first exec.
	create := func(withNet bool) (id string, wait, total time.Duration, err error) {
		return e.createAndExecOn(ctx, c, zeish.CreateSandboxRequest{MemoryMiB: mem, Network: reqs[withNet]})
	}
	type samples = netSamples
	creates := map[bool]*samples{true: {}, false: {}}
	for i := -e.opts.warmup; i < e.opts.runs && !skip("create"); i++ {
		for _, withNet := range []bool{i%2 == 0, i%2 != 0} {
			id, wait, total, err := create(withNet)
			cpu, cerr := qemuCPU(z.Log.String(), id)
			if id != "" {
				err = errors.Join(err, cerr, del(id))
				if i >= 0 {
					creates[withNet].ids = append(creates[withNet].ids, id)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("create (network %v): %w", withNet, err)
			}
			e.log.Info("net create", "run", i, "network", withNet, "wait_ms", wait.Milliseconds(), "total_ms", total.Milliseconds())
			if i >= 0 {
				creates[withNet].wait = append(creates[withNet].wait, ms(wait))
				creates[withNet].total = append(creates[withNet].total, ms(total))
				creates[withNet].cpu = append(creates[withNet].cpu, ms(cpu))
			}
		}
	}
	// Warm creates: a warm template's, each on a ready VM of its kind.
	warms := map[bool]*samples{true: {}, false: {}}
	if !skip("warm") {
		if warms, err = e.netWarmCreates(ctx, c, z, reqs); err != nil {
			return nil, err
		}
	}
	// Fork: one running parent of each kind, a child at a time (clone
	// wait=true, then the child's first exec), deleted after.
	parents := map[bool]string{}
	dropParents := func() error {
		var errs []error
		for withNet, id := range parents {
			errs = append(errs, del(id))
			delete(parents, withNet)
		}
		return errors.Join(errs...)
	}
	defer func() { err = errors.Join(err, dropParents()) }()
	for _, withNet := range []bool{false, true} {
		if skip("fork") {
			break
		}
		id, _, _, err := create(withNet)
		if id != "" {
			parents[withNet] = id
		}
		if err != nil {
			return nil, fmt.Errorf("fork parent: %w", err)
		}
	}
	forks := map[bool]*samples{true: {}, false: {}}
	for i := -e.opts.warmup; i < e.opts.runs && !skip("fork"); i++ {
		for _, withNet := range []bool{i%2 == 0, i%2 != 0} {
			start := time.Now()
			res, err := c.CloneSandbox(ctx, parents[withNet], zeish.CloneRequest{}, zeish.Wait())
			wait := time.Since(start)
			for _, k := range res.Sandboxes {
				e.track(k.ID)
				if k.State != sandbox.StateRunning && err == nil {
					err = fmt.Errorf("child %s is %s: %s", k.ID, k.State, k.StateReason)
				}
				if err == nil {
					err = firstExecOn(ctx, c, k.ID)
				}
			}
			total := time.Since(start)
			var cpu time.Duration
			for _, k := range res.Sandboxes {
				var cerr error
				cpu, cerr = qemuCPU(z.Log.String(), k.ID)
				err = errors.Join(err, cerr)
			}
			if err == nil && len(res.Sandboxes) != 1 {
				err = fmt.Errorf("clone made %d children", len(res.Sandboxes))
			}
			for _, k := range res.Sandboxes {
				err = errors.Join(err, del(k.ID))
				if i >= 0 {
					forks[withNet].ids = append(forks[withNet].ids, k.ID)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("fork (network %v): %w", withNet, err)
			}
			e.log.Info("net fork", "run", i, "network", withNet, "wait_ms", wait.Milliseconds(), "total_ms", total.Milliseconds())
			if i >= 0 {
				forks[withNet].wait = append(forks[withNet].wait, ms(wait))
				forks[withNet].total = append(forks[withNet].total, ms(total))
				forks[withNet].cpu = append(forks[withNet].cpu, ms(cpu))
			}
		}
	}
	// Idle parents would take CPU from the throughput runs below.
	if err := dropParents(); err != nil {
		return nil, err
	}
	sC, sCn := r.add(newSeries("create_first_exec_network", "ms", creates[true].total)), r.add(newSeries("create_first_exec_no_network", "ms", creates[false].total))
	sCW, sCWn := r.add(newSeries("create_wait_network", "ms", creates[true].wait)), r.add(newSeries("create_wait_no_network", "ms", creates[false].wait))
	sWC, sWCn := r.add(newSeries("warm_create_first_exec_network", "ms", warms[true].total)), r.add(newSeries("warm_create_first_exec_no_network", "ms", warms[false].total))
	sF, sFn := r.add(newSeries("fork_first_exec_network", "ms", forks[true].total)), r.add(newSeries("fork_first_exec_no_network", "ms", forks[false].total))
	sFW, sFWn := r.add(newSeries("fork_wait_network", "ms", forks[true].wait)), r.add(newSeries("fork_wait_no_network", "ms", forks[false].wait))
	t := statTable("One networked zeishd: sandboxes with a network card and with network: {enabled: false}, interleaved", "ms")
	t.Rows = append(t.Rows,
		statRow("create → first exec, network (TAP, /30, firewall, policers)", sC),
		statRow("create → first exec, enabled: false (no NIC)", sCn),
		statRow("… of which create wait=true, network", sCW),
		statRow("… of which create wait=true, enabled: false", sCWn),
		statRow("warm create on a ready VM → first exec, network", sWC),
		statRow("warm create on a ready VM → first exec, enabled: false (a ready VM without a card)", sWCn),
		statRow("clone → child's first exec, network (new TAP, address, guest reconfigured)", sF),
		statRow("clone → child's first exec, enabled: false", sFn),
		statRow("… of which clone wait=true, network", sFW),
		statRow("… of which clone wait=true, enabled: false", sFWn),
	)
	// Runs alternate, so run i of each kind is a pair taken moments apart:
	// the median of the pairs' differences is less swayed by load drift
	// than the difference of the medians.
	sDC := r.add(newSeries("create_first_exec_network_minus_none_paired", "ms", pairs(creates[true].total, creates[false].total)))
	sDW := r.add(newSeries("warm_create_first_exec_network_minus_none_paired", "ms", pairs(warms[true].total, warms[false].total)))
	sDF := r.add(newSeries("fork_first_exec_network_minus_none_paired", "ms", pairs(forks[true].total, forks[false].total)))
	sum := statTable("End to end, what networking adds (network − enabled: false)", "ms")
	sum.Rows = [][]string{
		{"create → first exec: difference of medians", fmtNum(sC.Median - sCn.Median), "", "", ""},
		statRow("create → first exec: paired differences", sDC),
		{"warm create on a ready VM → first exec: difference of medians", fmtNum(sWC.Median - sWCn.Median), "", "", ""},
		statRow("warm create on a ready VM → first exec: paired differences", sDW),
		{"clone → child's first exec: difference of medians", fmtNum(sF.Median - sFn.Median), "", "", ""},
		statRow("clone → child's first exec: paired differences", sDF),
	}
	r.Tables = append(r.Tables, t, sum)

	// What the guest and its QEMU worked, in CPU time, from QEMU's start
	// to the first exec's answer: on a loaded host wall time mostly
	// measures waiting for a CPU, CPU time far less so (TCG translation,
	// the guest's kernel and sandboxd, QEMU's device emulation).
	sCC, sCCn := r.add(newSeries("create_qemu_cpu_network", "ms", creates[true].cpu)), r.add(newSeries("create_qemu_cpu_no_network", "ms", creates[false].cpu))
	sFC, sFCn := r.add(newSeries("fork_qemu_cpu_network", "ms", forks[true].cpu)), r.add(newSeries("fork_qemu_cpu_no_network", "ms", forks[false].cpu))
	ct := statTable("QEMU's CPU time (user + system), its start → the first exec answered", "ms")
	ct.Rows = append(ct.Rows,
		statRow("create, network", sCC), statRow("create, enabled: false", sCCn),
		statRow("create: paired differences", r.add(newSeries("create_qemu_cpu_network_minus_none_paired", "ms", pairs(creates[true].cpu, creates[false].cpu)))),
		statRow("fork, network", sFC), statRow("fork, enabled: false", sFCn),
		statRow("fork: paired differences", r.add(newSeries("fork_qemu_cpu_network_minus_none_paired", "ms", pairs(forks[true].cpu, forks[false].cpu)))),
	)
	r.Tables = append(r.Tables, ct)

	// Steps zeishd times itself (its log), per kind of sandbox: what of
	// the difference happens in QEMU's start and in the guest's
	// configuration (address, MAC, route: sandboxd's reconfiguration on a
	// fork's resume).
	log := z.Log.String()
	st := statTable("Steps inside zeishd (its log), same sandboxes", "ms")
	for _, step := range []struct{ label, msg, key string }{
		{"QEMU start → first QMP answer", "vm started", "qmp_ready_ms"},
		{"guest configuration (hostname, clock, RNG, network), agent call", "guest configured", "configure_ms"},
	} {
		for _, k := range []struct {
			kind    string
			withNet bool
			s       *samples
		}{{"create, network", true, creates[true]}, {"create, enabled: false", false, creates[false]},
			{"warm create, network", true, warms[true]}, {"warm create, enabled: false", false, warms[false]},
			{"fork, network", true, forks[true]}, {"fork, enabled: false", false, forks[false]}} {
			name := strings.ReplaceAll(strings.ReplaceAll(k.kind, ", ", "_"), ": ", "_")
			got := stepMS(log, step.msg, step.key, k.s.ids)
			if len(got) == 0 {
				continue // a part left out; a warm create's QEMU started before it (a ready VM)
			}
			sv := r.add(newSeries(step.key+"_"+strings.ReplaceAll(name, " ", "_"), "ms", got))
			st.Rows = append(st.Rows, statRow(step.label+": "+k.kind, sv))
		}
	}
	r.Tables = append(r.Tables, st)
	// A difference only counts as met when the runs resolve the target:
	// the paired differences' median absolute deviation must be within it
	// too (on a busy TCG host it is seconds, and no verdict is possible).
	for _, g := range []struct {
		what       string
		on, off, d series
	}{{"create → first exec", sC, sCn, sDC}, {"a warm create on a ready VM → first exec", sWC, sWCn, sDW}, {"clone → child's first exec", sF, sFn, sDF}} {
		if len(g.d.Samples) == 0 {
			continue // left out (-net-skip)
		}
		diff, spread := g.on.Median-g.off.Median, mad(g.d.Samples)
		r.addGoal(goal{Name: fmt.Sprintf("networking's added cost to %s (difference of medians; met only if the paired differences' MAD, %s ms, is within the target too)", g.what, fmtNum(spread)),
			Target: fmt.Sprintf("≤ %d ms", netGoalMS), Value: diff, Unit: "ms", Met: diff <= netGoalMS && spread <= netGoalMS})
	}

	// Host side of a link, measured alone: what create and fork pay in
	// zeishd for networking, without the noise of whole VM boots.
	if !skip("link") {
		attach, detach, err := linkCosts(ctx, e.opts.runs*10, benchRateBytes, benchRatePackets)
		if err != nil {
			return nil, err
		}
		sAt, sDe := r.add(newSeries("link_attach_ready", "ms", attach)), r.add(newSeries("link_detach", "ms", detach))
		lt := statTable("Host side of a sandbox's link (network.Manager in a lab namespace, ready links on)", "ms")
		lt.Rows = append(lt.Rows,
			statRow("take a ready link + its firewall, policers (one nftables transaction): create and fork pay this", sAt),
			statRow("remove chain, sets and TAP: delete pays this", sDe),
		)
		r.Tables = append(r.Tables, lt)
	}
	if skip("iperf") {
		return r, nil
	}

	// Throughput: iperf3 from a zeish sandbox (uncapped) and from plain
	// QEMU on a TAP, both up at once, their runs interleaved so load drift
	// hits both; the server runs in the lab's internet.
	srv, err := startIperfServer(lab)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv()) }()
	zexec, done, err := e.zeishGuest(ctx, c, iperf, mem)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, done()) }()
	tp := map[bool]map[bool][]float64{true: {}, false: {}} // [zeish][reverse]
	err = e.rawGuest(ctx, lab, iperf, mem, func(rexec guestExec) error {
		for i := -e.opts.warmup; i < e.opts.runs; i++ {
			for _, reverse := range []bool{false, true} {
				for _, zeishFirst := range []bool{i%2 == 0, i%2 != 0} {
					x := rexec
					if zeishFirst {
						x = zexec
					}
					mbits, err := iperfRun(ctx, x, reverse)
					if err != nil {
						return fmt.Errorf("iperf3 (zeish %v, reverse %v): %w", zeishFirst, reverse, err)
					}
					e.log.Info("net iperf3", "run", i, "zeish", zeishFirst, "reverse", reverse, "mbit_s", mbits)
					if i >= 0 {
						tp[zeishFirst][reverse] = append(tp[zeishFirst][reverse], mbits)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sUp, sDown := r.add(newSeries("iperf3_zeish_guest_to_uplink", "Mbit/s", tp[true][false])), r.add(newSeries("iperf3_zeish_uplink_to_guest", "Mbit/s", tp[true][true]))
	sRUp, sRDown := r.add(newSeries("iperf3_raw_tap_guest_to_uplink", "Mbit/s", tp[false][false])), r.add(newSeries("iperf3_raw_tap_uplink_to_guest", "Mbit/s", tp[false][true]))
	tt := statTable(fmt.Sprintf("Throughput, iperf3 TCP, %d s per run, to/from a lab host (%s)", iperfSeconds, testenv.LabHostA), "Mbit/s")
	tt.Rows = append(tt.Rows,
		statRow("zeish sandbox: guest → uplink", sUp),
		statRow("plain QEMU on a TAP: guest → uplink", sRUp),
		statRow("zeish sandbox: uplink → guest (-R)", sDown),
		statRow("plain QEMU on a TAP: uplink → guest (-R)", sRDown),
	)
	ratio := &table{Header: []string{"medians", "value"}}
	ratio.Rows = [][]string{
		{"zeish ÷ plain TAP, guest → uplink", fmtNum(sUp.Median/sRUp.Median) + "×"},
		{"zeish ÷ plain TAP, uplink → guest", fmtNum(sDown.Median/sRDown.Median) + "×"},
	}
	r.Tables = append(r.Tables, tt, ratio)
	r.Notes = append(r.Notes,
		fmt.Sprintf("runs: %d measured after %d warm-up; both kinds of sandbox come from the same zeishd and template, alternating which goes first", e.opts.runs, e.opts.warmup),
		fmt.Sprintf("warm creates: %d pairs (%d × runs); a warm template (the templates section's kind, built in this zeishd) at its warm size; before each create the bench waits until a ready VM of each kind waits (with a card, and without one, launched from the template's card-less image), and a create that did not adopt one fails the run", netWarmRuns*e.opts.runs, netWarmRuns),
		"zeishd runs in a NetLab namespace whose only route leads to the lab's 198.18.0.0/15 internet (checked before the runs)",
		fmt.Sprintf("networked creates and fork parents ask for the default caps (%d bytes/s, %d packets/s), so their firewall carries the policers; the throughput sandbox is uncapped", benchRateBytes, benchRatePackets),
		"iperf3 is the host's Debian binary with its libraries, copied into each guest through the files API and started through the copied ld.so (no template change); the server runs in the lab's internet namespace",
		"zeish path: TAP, nftables forward chains (isolation, policy), masquerade out of the uplink; plain path: the same template booted by bare QEMU on a TAP routed to the lab, no firewall, no NAT",
		"the plain QEMU runs in a CPU cgroup beside zeishd's VMs (under \"zeish\", the same quota), so both compete for CPU alike on a busy host",
		"the fork parents are deleted before the throughput runs; the zeish sandbox and the plain QEMU are both up during them",
	)
	return r, nil
}

// stepMS finds, in zeishd's text log, the lines with msg whose sandbox is
// one of ids and returns their key (an integer of ms).
func stepMS(log, msg, key string, ids []string) []float64 {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []float64
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "msg=\""+msg+"\"") {
			continue
		}
		var id, v string
		for _, f := range strings.Fields(line) {
			if k, val, ok := strings.Cut(f, "="); ok {
				switch k {
				case "sandbox":
					id = val
				case key:
					v = val
				}
			}
		}
		var n float64
		if want[id] && v != "" {
			if _, err := fmt.Sscan(v, &n); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// qemuCPU is the CPU time (user + system) so far of sandbox id's QEMU,
// found by the pid of its last "vm started" line in zeishd's log.
func qemuCPU(log, id string) (time.Duration, error) {
	pid := ""
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `msg="vm started"`) && strings.Contains(line, " sandbox="+id+" ") {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "pid="); ok {
					pid = v
				}
			}
		}
	}
	if pid == "" {
		return 0, fmt.Errorf("no \"vm started\" line for %s in zeishd's log", id)
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("qemu of %s: %w", id, err)
	}
	return statCPU(string(b))
}

// statCPU is utime + stime of a /proc/PID/stat line.
func statCPU(stat string) (time.Duration, error) {
	ticks, err := parseStatTicks(stat)
	return time.Duration(ticks) * time.Second / clockTicks, err
}

// mad is the median absolute deviation from the median: how far a typical
// sample lies from the middle, robust to the odd outlier.
func mad(xs []float64) float64 {
	m := median(xs)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - m)
	}
	return median(dev)
}

// pairs is a[i] − b[i] for each run both have.
func pairs(a, b []float64) []float64 {
	var d []float64
	for i := range min(len(a), len(b)) {
		d = append(d, a[i]-b[i])
	}
	return d
}

// sealedLab opens a NetLab and checks its node namespace reaches nothing
// but the lab; the caller closes it.
func sealedLab() (*testenv.NetLab, error) {
	lab, err := testenv.OpenNetLab()
	if err == nil {
		err = lab.Sealed()
	}
	if err != nil {
		if lab != nil {
			err = errors.Join(err, lab.Close())
		}
		return nil, fmt.Errorf("netlab: %w", err)
	}
	return lab, nil
}

// labServer starts a networked zeishd in the lab's node namespace, with no
// default caps (a sandbox that asks for none is uncapped) unless env (more
// settings, which win) gives some.
func (e *benchEnv) labServer(ctx context.Context, lab *testenv.NetLab, env ...string) (*zeish.Client, *testenv.Zeishd, func() error, error) {
	const listen = "127.0.0.1:7421"
	relay, err := lab.Relay(lab.Node, listen)
	if err != nil {
		return nil, nil, nil, err
	}
	z := &testenv.Zeishd{
		Bin:     e.zeishdBin,
		DataDir: filepath.Join(e.tmp, "data-net"),
		Netns:   lab.Node, Listen: listen, Addr: relay,
		Env: []string{
			"ZEISH_SANDBOXD=" + e.sandboxd,
			"ZEISH_TEMPLATE_CACHE=" + e.cacheDir,
			"ZEISH_LOG_LEVEL=debug", // for the steps' times (stepMS)
			"ZEISH_PLAN_RUNNING_SLOTS=100", "ZEISH_PLAN_CREATES_PER_MINUTE=1000", "ZEISH_PLAN_DAILY_CREATES=100000",
			"ZEISH_UPLINK=" + lab.Uplink, "ZEISH_DNS_UPSTREAM=" + lab.DNS, "ZEISH_NET_CIDR=10.213.0.0/24",
			"ZEISH_NET_ALLOW_RANGES=" + testenv.LabRange, "ZEISH_NET_RATE_BYTES=0", "ZEISH_NET_RATE_PACKETS=0",
			"ZEISH_READY_VMS=" + strconv.Itoa(e.opts.ready),
		},
		OwnProcessGroup: true,
	}
	z.Env = append(z.Env, env...)
	c, stop, err := e.startSide(ctx, z, ".net")
	return c, z, stop, err
}

// startSide starts z, a zeishd of a section's own beside the bench's, and
// returns a client for it (through z.Addr) and stop, which deletes every
// sandbox it has, stops it and keeps its log beside the main one's
// (-zeishd-log, with suffix).
func (e *benchEnv) startSide(ctx context.Context, z *testenv.Zeishd, suffix string) (*zeish.Client, func() error, error) {
	if err := z.Start(ctx); err != nil {
		return nil, nil, err
	}
	key, err := z.AdminKey()
	if err != nil {
		z.Stop()
		return nil, nil, err
	}
	c := zeish.NewClient("http://"+z.Addr+api.BasePath, key)
	stop := func() error {
		var errs []error
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if list, err := c.ListSandboxes(dctx, zeish.ListOptions{}); err == nil {
			for _, sb := range list {
				if _, err := c.DeleteSandbox(dctx, sb.ID, zeish.Wait()); err != nil {
					errs = append(errs, err)
				}
			}
		}
		errs = append(errs, z.Stop())
		if e.opts.zlog != "" {
			errs = append(errs, os.WriteFile(e.opts.zlog+suffix, []byte(z.Log.String()), 0o644))
		}
		return errors.Join(errs...)
	}
	return c, stop, nil
}

// guestExec runs argv in a guest; a non-zero exit is an error.
type guestExec func(ctx context.Context, argv ...string) (string, error)

// iperfSeconds is how long each iperf3 run sends.
const iperfSeconds = 5

// guestFile is a host file to copy into a guest, at /root/<Name>.
type guestFile struct{ Host, Name string }

// iperfBundle is the host's iperf3 with every library it loads (ldd) and
// the dynamic loader, so it runs in a guest whatever libraries the
// template has: /root/ld.so --library-path /root /root/iperf3.
func iperfBundle() ([]guestFile, error) {
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		return nil, fmt.Errorf("iperf3 (scripts/deps.sh installs it): %w", err)
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	files := []guestFile{{Host: bin, Name: "iperf3"}}
	for _, l := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x…)"; vdso has no file.
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			files = append(files, guestFile{Host: f[2], Name: f[0]})
		case len(f) >= 1 && strings.HasPrefix(f[0], "/") && strings.Contains(f[0], "ld-linux"):
			files = append(files, guestFile{Host: f[0], Name: "ld.so"})
		}
	}
	if !slices.ContainsFunc(files, func(f guestFile) bool { return f.Name == "ld.so" }) {
		return nil, fmt.Errorf("ldd %s named no dynamic loader:\n%s", bin, out)
	}
	return files, nil
}

// startIperfServer runs an iperf3 server on the lab's host A, in the lab's
// internet namespace; the returned func stops it.
func startIperfServer(lab *testenv.NetLab) (func() error, error) {
	cmd := exec.Command("nsenter", "--net=/run/netns/"+lab.Inet, "iperf3", "-s", "-B", testenv.LabHostA)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() error {
		cmd.Process.Kill()
		cmd.Wait()
		return nil
	}
	// Ready when it accepts a connection.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := testenv.DialIn(lab.Inet, "tcp", net.JoinHostPort(testenv.LabHostA, "5201"))
		if err == nil {
			c.Close()
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("iperf3 server did not start: %v: %s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// iperfRun runs one iperf3 TCP test from a guest holding iperfBundle in
// /root (reverse: the server sends) and returns what the receiver got, in
// Mbit/s.
func iperfRun(ctx context.Context, x guestExec, reverse bool) (float64, error) {
	argv := []string{"/root/ld.so", "--library-path", "/root", "/root/iperf3", "-c", testenv.LabHostA, "-t", fmt.Sprint(iperfSeconds), "-J"}
	if reverse {
		argv = append(argv, "-R")
	}
	var out string
	var err error
	// The server takes one test at a time; a busy answer right after the
	// previous test is retried.
	for try := 0; try < 5; try++ {
		if out, err = x(ctx, argv...); err == nil || !strings.Contains(out, "busy") {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return 0, fmt.Errorf("iperf3 said %q: %w", out, err)
	}
	if res.Error != "" || res.End.SumReceived.BitsPerSecond <= 0 {
		return 0, fmt.Errorf("iperf3: %q, %v bit/s", res.Error, res.End.SumReceived.BitsPerSecond)
	}
	return res.End.SumReceived.BitsPerSecond / 1e6, nil
}

// iperfEnv is the environment iperf3 runs with: its scratch files go to
// /root, whether or not the guest has a /tmp.
var iperfEnv = map[string]string{"TMPDIR": "/root"}

// execVia runs argv through a guest agent client; a non-zero exit is an error.
func execVia(run func(ctx context.Context, req guest.ExecRequest, stdout, stderr *strings.Builder) (int, error)) guestExec {
	return func(ctx context.Context, argv ...string) (string, error) {
		var out, errOut strings.Builder
		code, err := run(ctx, guest.ExecRequest{Argv: argv, Env: iperfEnv}, &out, &errOut)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d", code)
		}
		return out.String() + errOut.String(), err
	}
}

// zeishGuest creates an uncapped sandbox on c with files in /root; done
// deletes it.
func (e *benchEnv) zeishGuest(ctx context.Context, c *zeish.Client, files []guestFile, mem int) (_ guestExec, done func() error, err error) {
	sb, err := c.CreateSandbox(ctx, zeish.CreateSandboxRequest{MemoryMiB: mem}, zeish.Wait())
	done = func() error { return nil }
	if sb.ID != "" {
		e.track(sb.ID)
		done = func() error {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			_, err := c.DeleteSandbox(dctx, sb.ID, zeish.Wait())
			return err
		}
	}
	fail := func(err error) (guestExec, func() error, error) { return nil, nil, errors.Join(err, done()) }
	if err != nil {
		return fail(err)
	}
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		return fail(err)
	}
	if err := copyFiles(files, func(name string, f *os.File) error {
		_, err := conn.WriteFile(ctx, "/root/"+name, f, 0o755)
		return err
	}); err != nil {
		return fail(err)
	}
	return execVia(func(ctx context.Context, req guest.ExecRequest, stdout, stderr *strings.Builder) (int, error) {
		res, err := conn.Exec(ctx, api.ExecRequest{Argv: req.Argv, Env: req.Env}, stdout, stderr)
		return res.ExitCode, err
	}), done, nil
}

// cpuCgroupLikeZeish puts a plain QEMU into a CPU cgroup of its own next
// to those zeishd makes for its VMs (vmm/qemu/confine.go: under "zeish",
// quota of vcpus+1 cores), so that on a busy host the scheduler weighs it
// as it weighs a sandbox. Outside that group, the plain QEMU's threads
// would each count as much as the whole "zeish" group, every sandbox of
// every zeishd on the host together, and the comparison would measure CPU
// shares, not the network path. Without a "zeish" CPU cgroup (zeishd not
// confining) nothing is done. undo removes the cgroup once QEMU is gone.
func cpuCgroupLikeZeish(pid, vcpus int) (undo func(), err error) {
	quota := strconv.Itoa((vcpus + 1) * 100000)
	var dir string
	var files map[string]string
	switch {
	case fileExists("/sys/fs/cgroup/zeish/cgroup.procs"): // v2
		dir = fmt.Sprintf("/sys/fs/cgroup/zeish/bench-raw-%d", pid)
		files = map[string]string{"cpu.max": quota + " 100000"}
	case fileExists("/sys/fs/cgroup/cpu/zeish/cgroup.procs"): // v1
		dir = fmt.Sprintf("/sys/fs/cgroup/cpu/zeish/bench-raw-%d", pid)
		files = map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": quota}
	default:
		return func() {}, nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	undo = func() {
		// QEMU is gone: the group is empty, rmdir removes it.
		if err := unix.Rmdir(dir); err != nil {
			slog.Warn("bench: remove cgroup", "dir", dir, "err", err)
		}
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			undo()
			return nil, fmt.Errorf("cgroup %s: %w", name, err)
		}
	}
	// cgroup.procs moves every thread of the process.
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		undo()
		return nil, fmt.Errorf("cgroup procs: %w", err)
	}
	return undo, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// copyFiles opens each file and hands it to put.
func copyFiles(files []guestFile, put func(name string, f *os.File) error) error {
	for _, gf := range files {
		f, err := os.Open(gf.Host)
		if err != nil {
			return err
		}
		err = put(gf.Name, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("copy %s into the guest: %w", gf.Host, err)
		}
	}
	return nil
}

// rawGuest boots the base template in plain QEMU on a TAP routed to the
// lab (made in the lab's node namespace, removed after), gives the guest its
// address through the agent, puts files in /root and calls use while it
// runs.
func (e *benchEnv) rawGuest(ctx context.Context, lab *testenv.NetLab, files []guestFile, mem int, use func(guestExec) error) (err error) {
	for _, args := range [][]string{
		{"-n", lab.Node, "tuntap", "add", "dev", rawTAP, "mode", "tap", "vnet_hdr"},
		{"-n", lab.Node, "addr", "add", rawGateway + "/30", "dev", rawTAP},
		{"-n", lab.Node, "link", "set", rawTAP, "up"},
		{"-n", lab.Inet, "route", "add", rawNet, "via", lab.NodeAddr},
	} {
		if err := ipIn(args...); err != nil {
			return errors.Join(err, ipIn("-n", lab.Node, "link", "del", rawTAP))
		}
	}
	defer func() { err = errors.Join(err, ipIn("-n", lab.Node, "link", "del", rawTAP)) }()
	opts := rawOpts{memMiB: mem, vcpus: smallVCPUs, diskMiB: smallDiskMiB, netns: lab.Node,
		netdev:  "tap,id=net0,ifname=" + rawTAP + ",script=no,downscript=no",
		started: func(pid int) (func(), error) { return cpuCgroupLikeZeish(pid, smallVCPUs) }}
	_, err = e.bootRawWith(ctx, opts, func(dir string) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		g, err := guest.Connect(cctx, func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(dir, "agent.sock"))
		}, guest.WithLogger(e.log))
		if err != nil {
			return err
		}
		defer g.Close()
		if err := g.Configure(ctx, guest.Config{Hostname: "raw", Time: time.Now(), Network: &guest.Network{
			Interface: "eth0", MAC: rawMAC, Address: rawGuest + "/30", Gateway: rawGateway}}); err != nil {
			return fmt.Errorf("configure raw guest: %w", err)
		}
		if err := copyFiles(files, func(name string, f *os.File) error {
			_, err := g.WriteFile(ctx, "/root/"+name, 0o755, f)
			return err
		}); err != nil {
			return err
		}
		return use(execVia(func(ctx context.Context, req guest.ExecRequest, stdout, stderr *strings.Builder) (int, error) {
			res, err := g.Exec(ctx, req, nil, stdout, stderr)
			return res.ExitCode, err
		}))
	})
	return err
}

// linkCosts times n link attaches (from the ready links, with a firewall
// and policers) and detaches by network.Manager alone, in a lab namespace
// of its own.
func linkCosts(ctx context.Context, n int, rateBytes, ratePackets int64) (attach, detach []float64, err error) {
	lab, err := testenv.OpenNetLab()
	if lab != nil {
		defer func() { err = errors.Join(err, lab.Close()) }()
	}
	if err != nil {
		return nil, nil, err
	}
	in := func(f func() error) error { return testenv.InNetns(lab.Node, f) }
	var m *network.Manager
	if err := in(func() (err error) {
		m, err = network.Open(ctx, network.Config{CIDR: "10.213.0.0/16", Uplink: lab.Uplink, Upstreams: []string{lab.DNS}, AllowRanges: []string{testenv.LabRange},
			Rates: network.Rates{Bytes: rateBytes, Packets: ratePackets}})
		return err
	}); err != nil {
		return nil, nil, err
	}
	defer func() { err = errors.Join(err, in(m.Close)) }()
	m.StartWarm(4)
	policy := sandbox.Network{Enabled: true, Egress: sandbox.EgressDeny, Allow: []string{"198.18.5.0/24", "allowed.test"}}
	for range n {
		for m.Ready() == 0 {
			time.Sleep(time.Millisecond)
		}
		var addr string
		start := time.Now()
		if err := in(func() error {
			l, err := m.Allocate()
			if err != nil {
				return err
			}
			addr = l.Guest.String()
			_, err = m.Attach(addr, policy)
			return err
		}); err != nil {
			return nil, nil, err
		}
		attach = append(attach, ms(time.Since(start)))
		start = time.Now()
		if err := in(func() error { return m.Detach(addr) }); err != nil {
			return nil, nil, err
		}
		detach = append(detach, ms(time.Since(start)))
	}
	return attach, detach, nil
}

func ipIn(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netWarmRuns is how many warm pairs the net section measures per run
// asked for (-runs): a warm create takes a fraction of a second, and its
// difference is tens of milliseconds in a noise of as much.
const netWarmRuns = 4

// netSamples are one kind's measurements in the net section.
type netSamples struct {
	wait, total []float64
	cpu         []float64 // the sandbox's QEMU's CPU time when its first exec returned
	ids         []string  // the measured sandboxes, for their steps in zeishd's log
}

// netWarmCreates builds a warm template in the lab's zeishd and creates
// from it, a sandbox with a network card and one without in turn, each on
// a ready VM of its kind: create → first exec like for like, neither
// booting. The first card-less create boots cold (the warm image has a
// card) and makes zeishd build the template's card-less image; it is not
// measured.
func (e *benchEnv) netWarmCreates(ctx context.Context, c *zeish.Client, z *testenv.Zeishd, reqs map[bool]*api.NetworkRequest) (map[bool]*netSamples, error) {
	out := map[bool]*netSamples{true: {}, false: {}}
	if e.opts.ready <= 0 {
		return out, nil // no ready VMs (-ready-vms 0): nothing like for like to measure
	}
	tpl, err := e.buildWarmTemplateOn(ctx, c, "bench-net-warm", 512, e.opts.memMiB)
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		c.DeleteTemplate(dctx, tpl.ID)
	}()
	w := tpl.Warm
	create := func(withNet bool) (id string, wait, total time.Duration, err error) {
		return e.createAndExecOn(ctx, c, zeish.CreateSandboxRequest{Template: tpl.Name, VCPUs: w.VCPUs, MemoryMiB: w.MemoryMiB, DiskMiB: w.DiskMiB,
			Network: reqs[withNet]})
	}
	del := func(id string) error { return deleteSandboxOn(ctx, c, id) }
	// The card-less image: made after the first card-less create.
	id, _, _, err := create(false)
	if id != "" {
		err = errors.Join(err, del(id))
	}
	if err != nil {
		return nil, fmt.Errorf("first card-less warm create: %w", err)
	}
	both := 2 * e.opts.ready
	for i := -e.opts.warmup; i < netWarmRuns*e.opts.runs; i++ {
		for _, withNet := range []bool{i%2 == 0, i%2 != 0} {
			// Both kinds ready, and nothing being launched meanwhile.
			if err := waitReadyAt(ctx, z.Addr, both, 5*time.Minute); err != nil {
				return nil, err
			}
			hits, err := metricAt(ctx, z.Addr, "zeish_node_warm_creates_total", `ready="hit"`)
			if err != nil {
				hits = 0 // not served before the first hit
			}
			id, wait, total, err := create(withNet)
			if err == nil {
				if got, herr := metricAt(ctx, z.Addr, "zeish_node_warm_creates_total", `ready="hit"`); herr != nil || got != hits+1 {
					err = fmt.Errorf("the warm create (network %v) did not adopt a ready VM (hits %v → %v, %v)", withNet, hits, got, herr)
				}
			}
			// (No QEMU CPU time: the ready VM's QEMU ran its launch and
			// warm-up before the create.)
			if id != "" {
				err = errors.Join(err, del(id))
			}
			if err != nil {
				return nil, fmt.Errorf("warm create (network %v): %w", withNet, err)
			}
			e.log.Info("net warm create", "run", i, "network", withNet, "wait_ms", wait.Milliseconds(), "total_ms", total.Milliseconds())
			if i >= 0 {
				s := out[withNet]
				s.ids = append(s.ids, id)
				s.wait = append(s.wait, ms(wait))
				s.total = append(s.total, ms(total))
			}
		}
	}
	return out, nil
}

// createAndExecOn creates a sandbox through c (wait=true) and runs its first exec:
// wait is the create call alone, total the whole create → first exec.
func (e *benchEnv) createAndExecOn(ctx context.Context, c *zeish.Client, req zeish.CreateSandboxRequest) (id string, wait, total time.Duration, err error) {
	start := time.Now()
	sb, err := c.CreateSandbox(ctx, req, zeish.Wait())
	wait = time.Since(start)
	if sb.ID != "" {
		e.track(sb.ID)
	}
	if err == nil && sb.State != sandbox.StateRunning {
		err = fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
	}
	if err == nil {
		err = firstExecOn(ctx, c, sb.ID)
	}
	return sb.ID, wait, time.Since(start), err
}
