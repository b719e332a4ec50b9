package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

// maxWaitSeconds is the longest the server holds one wait, as ?wait=true does.
const maxWaitSeconds = 600

// progressEvery is how often the progress line is redrawn and states polled.
const progressEvery = time.Second

// waitMode decides how a command honours --wait. Off a terminal the server
// does the waiting (?wait=true) and nothing is drawn, so scripts see one call
// and clean output. On a terminal the call returns at once and the command
// waits itself (settle), drawing progress on stderr meanwhile; the result is
// the same.
func (a *app) waitMode(wait bool) (opts []zeish.CallOption, watch bool) {
	switch {
	case !wait:
		return nil, false
	case a.errIsTerminal:
		return nil, true
	}
	return []zeish.CallOption{zeish.Wait()}, false
}

// settleOne is settle for one sandbox.
func (a *app) settleOne(ctx context.Context, sb zeish.Sandbox) (zeish.Sandbox, error) {
	sbs, err := a.settle(ctx, []zeish.Sandbox{sb})
	if err != nil {
		return zeish.Sandbox{}, err
	}
	return sbs[0], nil
}

// settle waits until every sandbox is in no transition, as ?wait=true would
// have, with a progress line on stderr: elapsed seconds and states.
func (a *app) settle(ctx context.Context, sbs []zeish.Sandbox) ([]zeish.Sandbox, error) {
	p := a.startProgress(ctx, sbs)
	defer p.stop()
	out := make([]zeish.Sandbox, len(sbs))
	// One after another is as fast as all at once: they settle in parallel
	// on the server, and each wait returns as soon as its sandbox has.
	for i, sb := range sbs {
		got, err := a.sdk().WaitSandbox(ctx, sb.ID, zeish.WaitRequest{TimeoutSeconds: maxWaitSeconds})
		if err != nil {
			return nil, err
		}
		out[i] = got
		p.update(i, got.State, true)
	}
	// A sandbox that settled in error fails the command, as Wait() does.
	for _, sb := range out {
		if sb.State == zeish.StateError {
			return out, &zeish.SandboxError{Sandbox: sb}
		}
	}
	return out, nil
}

// progress redraws one line on stderr, in place, until stopped.
type progress struct {
	w       io.Writer
	started time.Time
	ids     []string
	cancel  context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	states  []zeish.State
	settled []bool
}

func (a *app) startProgress(ctx context.Context, sbs []zeish.Sandbox) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{
		w:       a.err,
		started: time.Now(),
		cancel:  cancel,
		done:    make(chan struct{}),
		states:  make([]zeish.State, len(sbs)),
		settled: make([]bool, len(sbs)),
	}
	for i, sb := range sbs {
		p.ids = append(p.ids, sb.ID)
		p.states[i] = sb.State
	}
	client := a.sdk() // built here: app is not safe for concurrent use
	go func() {
		defer close(p.done)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			p.draw()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p.poll(ctx, client)
		}
	}()
	return p
}

// poll refreshes the states of the sandboxes still waited on. A failed poll
// only leaves the line stale; the wait itself reports errors.
func (p *progress) poll(ctx context.Context, client *zeish.Client) {
	for i, id := range p.ids {
		p.mu.Lock()
		settled := p.settled[i]
		p.mu.Unlock()
		if settled {
			continue
		}
		if sb, err := client.GetSandbox(ctx, id); err == nil {
			p.update(i, sb.State, false)
		}
	}
}

func (p *progress) update(i int, state zeish.State, settled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.settled[i] {
		return // a late poll must not overwrite the wait's answer
	}
	p.states[i], p.settled[i] = state, settled
}

func (p *progress) draw() {
	p.mu.Lock()
	line := progressLine(p.ids, p.states, time.Since(p.started))
	p.mu.Unlock()
	// \r and erase-to-end-of-line redraw in place.
	fmt.Fprintf(p.w, "\r%s\x1b[K", line)
}

// stop ends the redrawing and erases the line, so what follows starts clean.
func (p *progress) stop() {
	p.cancel()
	<-p.done
	fmt.Fprint(p.w, "\r\x1b[K")
}

// progressLine says what is waited on: "waiting for sbx_1: starting (3s)",
// or for many "waiting for 3 sandboxes: 2 starting, 1 running (3s)".
func progressLine(ids []string, states []zeish.State, elapsed time.Duration) string {
	secs := int(elapsed / time.Second)
	if len(ids) == 1 {
		return fmt.Sprintf("waiting for %s: %s (%ds)", ids[0], states[0], secs)
	}
	var order []zeish.State
	count := map[zeish.State]int{}
	for _, s := range states {
		if count[s] == 0 {
			order = append(order, s)
		}
		count[s]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", count[s], s)
	}
	return fmt.Sprintf("waiting for %d sandboxes: %s (%ds)", len(ids), strings.Join(parts, ", "), secs)
}
