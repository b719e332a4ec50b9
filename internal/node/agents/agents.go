// Package agents keeps a node's connections to its guests' agents
// (sandboxd, over the VM's virtio-serial socket): one live connection per
// sandbox, made one at a time (the VMM's agent socket takes one client at
// a time) and never replaced while it lives, so a data-plane request that
// reconnects does not end another's session under it.
package agents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/vmm"
)

// watchEvery is how often a connect waiting for a guest checks that its
// VM still runs.
const watchEvery = 250 * time.Millisecond

// Driver is what a connection needs of the VMM driver.
type Driver interface {
	Alive(h *vmm.Handle) bool
	DialAgent(ctx context.Context, h *vmm.Handle) (net.Conn, error)
}

// Conns are the live agent connections of a node's sandboxes.
type Conns struct {
	driver Driver
	// bootTimeout bounds a boot's wait for its guest's agent.
	bootTimeout time.Duration

	mu   sync.Mutex
	live map[string]*guest.Client
	// connecting serialises connects per sandbox.
	connecting map[string]*sync.Mutex
}

// New keeps connections made through driver; Connect waits up to
// bootTimeout for a booting guest.
func New(driver Driver, bootTimeout time.Duration) *Conns {
	return &Conns{driver: driver, bootTimeout: bootTimeout, live: map[string]*guest.Client{}, connecting: map[string]*sync.Mutex{}}
}

// Lock holds sandbox id's connect lock until the returned func is called.
func (c *Conns) Lock(id string) (unlock func()) {
	c.mu.Lock()
	m := c.connecting[id]
	if m == nil {
		m = new(sync.Mutex)
		c.connecting[id] = m
	}
	c.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Live is sandbox id's connection unless it is missing or broken.
func (c *Conns) Live(id string) *guest.Client {
	c.mu.Lock()
	cl := c.live[id]
	c.mu.Unlock()
	if cl == nil {
		return nil
	}
	select {
	case <-cl.Done():
		return nil
	default:
		return cl
	}
}

// Set makes cl sandbox id's connection, closing the one it replaces.
func (c *Conns) Set(id string, cl *guest.Client) {
	c.mu.Lock()
	old := c.live[id]
	c.live[id] = cl
	c.mu.Unlock()
	if old != nil && old != cl {
		old.Close()
	}
}

// Drop closes and forgets sandbox id's connection.
func (c *Conns) Drop(id string) {
	c.mu.Lock()
	cl := c.live[id]
	delete(c.live, id)
	c.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

// Keep returns sandbox id's live connection, or the one connect makes
// (under the sandbox's connect lock, so one connection is made at a time
// and a live one is never replaced).
func (c *Conns) Keep(id string, connect func() (*guest.Client, error)) (*guest.Client, error) {
	if cl := c.Live(id); cl != nil {
		return cl, nil
	}
	defer c.Lock(id)()
	if cl := c.Live(id); cl != nil {
		return cl, nil // connected while we waited for the lock
	}
	cl, err := connect()
	if err != nil {
		return nil, err
	}
	c.Set(id, cl)
	return cl, nil
}

// CloseAll closes every connection (the node closes; the VMs run on).
func (c *Conns) CloseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, cl := range c.live {
		cl.Close()
		delete(c.live, id)
	}
}

// Dial dials h's agent socket.
func (c *Conns) Dial(h *vmm.Handle) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) { return c.driver.DialAgent(ctx, h) }
}

// Connect connects to h's agent within the boot bound. A guest that dies
// meanwhile (a kernel panic, a VMM that quits) ends the wait at once. The
// caller holds the sandbox's connect lock, or owns h alone.
func (c *Conns) Connect(ctx context.Context, h *vmm.Handle) (*guest.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, c.bootTimeout)
	defer cancel()
	go func() {
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-tick.C:
				if !c.driver.Alive(h) {
					cancel()
					return
				}
			}
		}
	}()
	cl, err := guest.Connect(cctx, c.Dial(h))
	if err != nil {
		if !c.driver.Alive(h) {
			return nil, fmt.Errorf("the VM exited before its agent answered: %w", errdefs.ErrUnavailable)
		}
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("the guest agent did not answer within %s: %w", c.bootTimeout, errdefs.ErrTimeout)
		}
		return nil, err
	}
	return cl, nil
}
