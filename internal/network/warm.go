package network

import (
	"runtime"
	"time"

	"github.com/vishvananda/netns"
)

// Making a TAP is the slow part of a guest's link (registering a network
// device waits for RCU grace periods: tens of milliseconds, more on a busy
// host), so the manager keeps a few links ready, TAP made, addressed and up,
// and create and fork take one: what is left on their path is one nftables
// transaction.

// StartWarm keeps n links ready from now on. Call it once every guest that
// exists was attached again (after a restart), so that a ready link never
// takes an address a sandbox still owns.
func (m *Manager) StartWarm(n int) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	m.warmTarget = n
	m.mu.Unlock()
	m.warmWG.Add(1)
	go m.keepWarm()
	m.kickWarm()
}

func (m *Manager) kickWarm() {
	select {
	case m.warmKick <- struct{}{}:
	default:
	}
}

func (m *Manager) keepWarm() {
	defer m.warmWG.Done()
	// This thread makes TAPs: it must be in the manager's namespace (the
	// process's, in zeishd; a test's lab, in tests). It is never unlocked,
	// so Go retires the thread when the goroutine ends.
	runtime.LockOSThread()
	if err := netns.Set(m.ns); err != nil {
		m.log.Error("network: ready links: enter namespace", "err", err)
		return
	}
	for {
		select {
		case <-m.done:
			return
		case <-m.warmKick:
		}
		for {
			m.mu.Lock()
			need := len(m.warm) < m.warmTarget
			m.mu.Unlock()
			if !need {
				break
			}
			l, err := m.pool.Allocate()
			if err != nil {
				break // the pool is full: create and fork will say so
			}
			if err := ensureTAP(m.nl, l); err != nil {
				m.log.Warn("network: ready link", "tap", l.TAP, "err", err)
				m.pool.Release(l.Guest)
				select {
				case <-m.done:
					return
				case <-time.After(time.Second):
				}
				continue
			}
			m.mu.Lock()
			m.warm = append(m.warm, l)
			m.made[l.TAP] = true
			m.mu.Unlock()
		}
	}
}

// takeWarm returns a ready link, if there is one.
func (m *Manager) takeWarm() (Link, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.warm) == 0 {
		return Link{}, false
	}
	l := m.warm[0]
	m.warm = m.warm[1:]
	return l, true
}

// Ready is how many links are ready now.
func (m *Manager) Ready() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.warm)
}
