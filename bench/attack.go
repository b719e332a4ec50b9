package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/procscan"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name: "attack",
		about: "a third account's exec and create latency on an idle host and under attack (a silent guest behind a public port " +
			"called by more clients than zeishd has connections, and a DNS flood from another guest), in a NetLab",
		run:   runAttack,
		optIn: true,
	})
}

// attackClients is how many clients call the silent guest's public port
// at once: more than zeishd's connection cap (ZEISH_MAX_CONNECTIONS,
// 1024), which the data plane's budget is there to keep them from taking.
const attackClients = 1100

// runAttack measures what a tenant's attack costs another tenant: account
// A's guest listens on a public port and never answers while clients
// without a token call it, account B's guest floods the node's DNS
// forwarder, and account C's exec (on a running sandbox) and create
// (to running, then its first exec) are timed before and during it. The
// figure is reported, not judged: the bar is C within 2× of idle.
func runAttack(ctx context.Context, e *benchEnv) (_ *report, err error) {
	r := &report{Section: "attack", Title: fmt.Sprintf("A tenant under another's attack: exec and create latency (%d MiB, %s)", e.opts.memMiB, e.accel)}
	lab, err := sealedLab()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, lab.Close()) }()
	nettool, err := testenv.BuildStatic("./e2e/nettool")
	if err != nil {
		return nil, err
	}
	// The node's defaults, as an install has them: rate caps per guest, and
	// the info log (a debug line for each of the attackers' requests would
	// be zeishd's own load, not theirs).
	admin, z, stop, err := e.labServer(ctx, lab, "ZEISH_NET_RATE_BYTES=12500000", "ZEISH_NET_RATE_PACKETS=20000", "ZEISH_LOG_LEVEL=info")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	base := "http://" + z.Addr
	accounts := map[string]*zeish.Client{}
	for _, name := range []string{"attacker-port", "attacker-dns", "victim"} {
		a, err := admin.CreateAccount(ctx, name)
		if err != nil {
			return nil, err
		}
		k, err := admin.CreateAPIKey(ctx, a.ID)
		if err != nil {
			return nil, err
		}
		// Every call on a connection of its own, as a new client's: a
		// connection kept from before the attack would not show whether a
		// client can still get one.
		accounts[name] = zeish.NewClient(base+api.BasePath, k.Key,
			zeish.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}))
	}
	// labServer's stop deletes the admin's sandboxes; these are the
	// accounts'.
	var made []func() error
	defer func() {
		for _, del := range made {
			err = errors.Join(err, del())
		}
	}()
	guestWith := func(c *zeish.Client, name string) (zeish.Sandbox, *zeish.SandboxConn, error) {
		sb, err := c.CreateSandbox(ctx, zeish.CreateSandboxRequest{Name: name, MemoryMiB: e.opts.memMiB}, zeish.Wait())
		if sb.ID != "" {
			e.track(sb.ID)
			made = append(made, func() error { return deleteSandboxOn(ctx, c, sb.ID) })
		}
		if err == nil && sb.State != sandbox.StateRunning {
			err = fmt.Errorf("%s is %s: %s", name, sb.State, sb.StateReason)
		}
		if err != nil {
			return sb, nil, err
		}
		conn, err := c.Connect(ctx, sb.ID)
		if err != nil {
			return sb, nil, err
		}
		f, err := os.Open(nettool)
		if err != nil {
			return sb, nil, err
		}
		defer f.Close()
		_, err = conn.WriteFile(ctx, "/root/nettool", f, 0o755)
		return sb, conn, err
	}
	silentSB, silentConn, err := guestWith(accounts["attacker-port"], "silent")
	if err != nil {
		return nil, err
	}
	floodSB, floodConn, err := guestWith(accounts["attacker-dns"], "flood")
	if err != nil {
		return nil, err
	}
	attackerVMs := func() []int { return append(procscan.Mentioning(silentSB.ID), procscan.Mentioning(floodSB.ID)...) }
	victim := accounts["victim"]
	_, conn, err := guestWith(victim, "victim")
	if err != nil {
		return nil, err
	}
	if _, err := silentConn.Exec(ctx, zeish.ExecRequest{Argv: []string{"sh", "-c", "/root/nettool silent 8080 </dev/null >/dev/null 2>&1 &"}}, nil, nil); err != nil {
		return nil, err
	}
	if err := waitGuestPort(ctx, lab.Node, silentSB.Address+":8080"); err != nil {
		return nil, err
	}
	if _, err := accounts["attacker-port"].SetPort(ctx, silentSB.ID, 8080, true); err != nil {
		return nil, err
	}

	// Idle and attacked phases take turns, so the load of the rest of the
	// host (other work on a shared machine) falls on both alike.
	const rounds = 2
	execs, creates := max(1, 10*e.opts.runs/rounds), max(1, (e.opts.runs+rounds-1)/rounds)
	// A victim's call that does not finish within its bound failed (a
	// server whose connections the attackers hold never answers); after
	// attackGiveUp failures in a row the phase stops measuring that call.
	measure := func(ph *phase) {
		cpu := startCPU(z.PID(), attackerVMs())
		for i := -e.opts.warmup; i < execs && !ph.exec.gaveUp(); i++ {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			start := time.Now()
			res, err := conn.Exec(cctx, zeish.ExecRequest{Argv: []string{"true"}}, nil, nil)
			cancel()
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			if i >= 0 {
				ph.exec.add(time.Since(start), err)
			}
		}
		for i := 0; i < creates && !ph.create.gaveUp(); i++ {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			id, _, total, err := e.createAndExecOn(cctx, victim, zeish.CreateSandboxRequest{MemoryMiB: e.opts.memMiB})
			cancel()
			if id != "" {
				err = errors.Join(err, deleteSandboxOn(ctx, victim, id))
			}
			ph.create.add(total, err)
		}
		ph.cpu.add(cpu.stop())
		e.log.Info("attack section", "phase", ph.name, "exec_p50_ms", percentile(ph.exec.ms, 0.5), "exec_failed", ph.exec.failed,
			"create_p50_ms", percentile(ph.create.ms, 0.5), "create_failed", ph.create.failed, "last_error", errors.Join(ph.exec.last, ph.create.last))
	}
	idle, attacked := &phase{name: "idle"}, &phase{name: "attack"}
	stats := &attackStats{}
	var floodLog strings.Builder
	var floodFor time.Duration
	for range rounds {
		measure(idle)
		if idle.exec.failed+idle.create.failed > 0 {
			return nil, fmt.Errorf("idle host: %d execs and %d creates failed: %w", idle.exec.failed, idle.create.failed, errors.Join(idle.exec.last, idle.create.last))
		}
		// The attack: a DNS flood from one guest (nettool dnsflood runs
		// for a set time: 10 s at a time, until stopped), and clients
		// without a token calling the silent guest's public port.
		if _, err := floodConn.Exec(ctx, zeish.ExecRequest{Argv: []string{"sh", "-c",
			"(while :; do /root/nettool dnsflood 10; done) >>/root/flood.log 2>&1 </dev/null & echo $! >/root/flood.pid"}}, nil, nil); err != nil {
			return nil, err
		}
		began := time.Now()
		actx, stopAttack := context.WithCancel(ctx)
		var wg sync.WaitGroup
		target := base + api.DataPath + "/sandboxes/" + silentSB.ID + "/ports/8080/"
		for range attackClients {
			wg.Add(1)
			go func() { defer wg.Done(); callSilentPort(actx, target, stats) }()
		}
		// Let the attackers take what they can before the victim moves.
		time.Sleep(5 * time.Second)
		stats.heldAtStart = append(stats.heldAtStart, stats.inFlight.Load())
		measure(attacked)
		stopAttack()
		wg.Wait()
		floodLog.Reset()
		floodConn.Exec(ctx, zeish.ExecRequest{Argv: []string{"sh", "-c", "kill $(cat /root/flood.pid); pkill -f 'nettool dnsflood'; cat /root/flood.log"}}, &floodLog, nil)
		floodFor += time.Since(began)
	}

	t := &table{Title: "victim's latency, idle vs under attack (ms)",
		Header: []string{"call", "idle p50", "idle p95", "attack p50", "attack p95", "p50 ratio", "p95 ratio", "runs", "failed under attack"}}
	for _, c := range []struct {
		name         string
		idle, attack victimCalls
	}{{"exec `true`", idle.exec, attacked.exec}, {"create → first exec", idle.create, attacked.create}} {
		i50, i95 := percentile(c.idle.ms, 0.5), percentile(c.idle.ms, 0.95)
		a50, a95 := percentile(c.attack.ms, 0.5), percentile(c.attack.ms, 0.95)
		failed := fmt.Sprint(c.attack.failed)
		if c.attack.last != nil {
			failed += ": " + c.attack.last.Error()
		}
		t.Rows = append(t.Rows, []string{c.name, fmtNum(i50), fmtNum(i95), fmtNum(a50), fmtNum(a95), fmtNum(a50 / i50), fmtNum(a95 / i95),
			fmt.Sprint(len(c.attack.ms)), failed})
		r.add(newSeries(c.name+" idle", "ms", c.idle.ms))
		r.add(newSeries(c.name+" under attack", "ms", c.attack.ms))
		r.addGoal(goal{Name: c.name + " p95 under attack ÷ idle", Target: "≤ 2, none failed", Value: a95 / i95, Unit: "×",
			Met: a95/i95 <= 2 && c.attack.failed == 0})
	}
	r.Tables = append(r.Tables, t)
	cpuTable := &table{Title: "CPU while the victim measured (% of one core)",
		Header: []string{"phase", "zeishd", "the attackers' two VMs (QEMU)", "the bench (attacking clients, relay)", "load average (1 min, end)"}}
	for _, ph := range []*phase{idle, attacked} {
		pct := func(sec float64) string { return fmtNum(sec / ph.cpu.seconds * 100) }
		cpuTable.Rows = append(cpuTable.Rows, []string{ph.name, pct(ph.cpu.zeishd), pct(ph.cpu.vms), pct(ph.cpu.bench), ph.cpu.load})
	}
	r.Tables = append(r.Tables, cpuTable)
	r.Notes = append(r.Notes,
		fmt.Sprintf("attackers: %d clients without a token calling a public port whose guest never answers, each on a new connection, "+
			"waiting as Retry-After says after a 429: %.0f requests a second were answered 429 (the connection closed), %v requests were "+
			"in flight at the clients 5 s into each round, %d ended otherwise (503 timeout after the header limit, errors); they run on this host, their CPU is the bench's",
			attackClients, float64(stats.refused.Load())/max(1, floodFor.Seconds()), stats.heldAtStart, stats.other.Load()),
		"DNS flood from a second account's guest (nettool dnsflood, 10 s runs, the last of each round cut): "+floodSum(floodLog.String(), floodFor),
		fmt.Sprintf("%d rounds of an idle phase then an attacked one; per phase %d execs and %d creates", rounds, execs, creates))
	return r, nil
}

// phase is what the victim measured in one kind of phase, over all rounds.
type phase struct {
	name         string
	exec, create victimCalls
	cpu          cpuUse
}

// cpuUse is CPU seconds of zeishd, of VMs and of the bench over wall
// seconds.
type cpuUse struct {
	zeishd, vms, bench, seconds float64
	load                        string
}

func (c *cpuUse) add(o cpuUse) {
	c.zeishd, c.vms, c.bench, c.seconds, c.load = c.zeishd+o.zeishd, c.vms+o.vms, c.bench+o.bench, c.seconds+o.seconds, o.load
}

// cpuWatch measures the CPU zeishd (pid), some VMs and this process use
// from start to stop.
type cpuWatch struct {
	pid, self int
	vms       []int
	at        map[int]int64 // ticks at the start, by pid
	began     time.Time
}

func startCPU(zeishd int, vms []int) *cpuWatch {
	w := &cpuWatch{pid: zeishd, self: os.Getpid(), vms: vms, at: map[int]int64{}, began: time.Now()}
	for _, p := range append([]int{w.pid, w.self}, vms...) {
		w.at[p], _ = cpuTicks(p)
	}
	return w
}

func (w *cpuWatch) stop() cpuUse {
	used := func(p int) float64 {
		t, _ := cpuTicks(p)
		return float64(t-w.at[p]) / clockTicks
	}
	u := cpuUse{zeishd: used(w.pid), bench: used(w.self), seconds: time.Since(w.began).Seconds(), load: loadAverage()}
	for _, p := range w.vms {
		u.vms += used(p)
	}
	return u
}

// attackGiveUp is how many failed calls in a row end a phase's
// measuring of that call.
const attackGiveUp = 3

// victimCalls are the times of a victim's calls that succeeded and the
// count of those that failed.
type victimCalls struct {
	ms     []float64
	failed int
	inARow int
	last   error
}

func (v *victimCalls) add(took time.Duration, err error) {
	if err != nil {
		v.failed, v.inARow, v.last = v.failed+1, v.inARow+1, err
		return
	}
	v.ms, v.inARow = append(v.ms, ms(took)), 0
}

func (v *victimCalls) gaveUp() bool { return v.inARow >= attackGiveUp }

// floodSum adds up nettool dnsflood's lines ("sent N answered N refused
// N") over a flood that lasted took.
func floodSum(log string, took time.Duration) string {
	var sent, answered, refused int
	for _, line := range strings.Split(log, "\n") {
		var s, a, r int
		if n, _ := fmt.Sscanf(line, "sent %d answered %d refused %d", &s, &a, &r); n == 3 {
			sent, answered, refused = sent+s, answered+a, refused+r
		}
	}
	return fmt.Sprintf("%d queries sent in the finished runs (about %.0f a second over %s), %d answered, %d of them refused",
		sent, float64(sent)/max(1, took.Seconds()), took.Round(time.Second), answered, refused)
}

// attackStats counts what the attackers got.
type attackStats struct {
	inFlight, refused, other atomic.Int64
	heldAtStart              []int64 // in flight 5 s into each round
}

// callSilentPort calls url again and again until ctx ends, each time on a
// new connection, as a client that wants to hold the server's connections
// does; after a 429 it waits as Retry-After says.
func callSilentPort(ctx context.Context, url string, st *attackStats) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		st.inFlight.Add(1)
		resp, err := client.Do(req)
		st.inFlight.Add(-1)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				st.other.Add(1)
				time.Sleep(time.Second)
			}
		case resp.StatusCode == http.StatusTooManyRequests:
			resp.Body.Close()
			st.refused.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		default:
			resp.Body.Close()
			st.other.Add(1)
		}
	}
}

// waitGuestPort waits until addr (a guest's) accepts connections from the
// lab's node namespace.
func waitGuestPort(ctx context.Context, ns, addr string) error {
	var err error
	for range 100 {
		var c net.Conn
		if c, err = testenv.DialIn(ns, "tcp", addr); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("guest port %s: %w", addr, err)
}
