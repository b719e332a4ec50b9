package network

import (
	"context"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
)

// A domain deny rule refuses the name at the forwarder; under egress allow
// the guest could still reach the name's servers by an address it got some
// other way (DNS over HTTPS, a hard-coded one). So the name's addresses are
// blocked too (the guest's dd-N set, which its chain drops before anything
// else): those of an exact name are looked up when the policy is set and
// every denyRefresh after, those of a name a wildcard covers when the guest
// asks for it (forwarder.lookUpDenied). What is not covered: names under a
// wildcard that the guest never asks the forwarder for (their addresses are
// never known), and addresses that change faster than the refresh. A
// server shared by many names (a CDN) is blocked for all of them.

// blockDeniedNames has g's exact denied names looked up now (in the
// background) when its egress is allow.
func (m *Manager) blockDeniedNames(g *guestNet) {
	if g.egressDeny || len(deniedNames(g)) == 0 {
		return
	}
	select {
	case m.denyKick <- struct{}{}:
	default:
	}
}

// deniedNames are the exact names of g's deny rules.
func deniedNames(g *guestNet) []string {
	var out []string
	for _, r := range g.deny {
		if r.Domain != "" && !r.Wildcard {
			out = append(out, r.Domain)
		}
	}
	return out
}

// refreshDenied looks up every guest's exact denied names when kicked and
// every denyRefresh, one query at a time: it takes no worker from guests.
func (m *Manager) refreshDenied() {
	defer m.refreshWG.Done()
	if err := m.enterNamespace(); err != nil {
		m.log.Error("network: denied names: enter the network namespace", "err", err)
		return
	}
	tick := time.NewTicker(denyRefresh)
	defer tick.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-tick.C:
		case <-m.denyKick:
		}
		m.mu.Lock()
		byName := map[string][]string{} // name → TAPs that deny it
		for _, g := range m.guests {
			if g.egressDeny {
				continue
			}
			for _, n := range deniedNames(g) {
				byName[n] = append(byName[n], g.link.TAP)
			}
		}
		m.mu.Unlock()
		for name, taps := range byName {
			select {
			case <-m.done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			addrs, ttl, err := m.fwd.lookUp(ctx, name)
			cancel()
			if err != nil || len(addrs) == 0 {
				continue
			}
			for _, tap := range taps {
				if err := m.rs.learn(tap, false, addrs, ttl); err != nil {
					m.log.Debug("dns: block a denied name's addresses", "name", name, "tap", tap, "err", err)
				}
			}
		}
	}
}

// enterNamespace puts the calling goroutine, for good, on a thread in the
// manager's network namespace (Go ends the thread with the goroutine).
func (m *Manager) enterNamespace() error {
	runtime.LockOSThread()
	return netns.Set(m.ns)
}

// inNamespace runs fn in the manager's network namespace: a socket is
// made in the namespace of the thread that makes it, and a caller (a
// test's, in a lab) may be in another. A thread that entered it is not
// given back to Go.
func (m *Manager) inNamespace(fn func() error) error {
	cur, err := netns.Get()
	if err == nil {
		same := cur.Equal(m.ns)
		cur.Close()
		if same {
			return fn()
		}
	}
	done := make(chan error, 1)
	go func() {
		if err := m.enterNamespace(); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}
