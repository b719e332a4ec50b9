package nodeapi

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
)

// Delivered is a node agent's view of the shared store. The node holds no
// secrets key, so it cannot open any sandbox's sealed secrets there (nor
// another account's): the control plane opens them and sends the node the
// secrets of one sandbox with the operation that configures its guest
// (create, a fork's children, a start, a restore). Delivered keeps those in
// memory and shows them in the records the node reads; records the node
// writes carry the sealed form the control plane made for them, never the
// clear text (the node's store could not seal it).
type Delivered struct {
	store.Store
	mu     sync.Mutex
	env    map[string]map[string]string // by sandbox id
	sealed map[string]string            // by sandbox id, for its first write
}

// NewDelivered wraps the node agent's store.
func NewDelivered(st store.Store) *Delivered {
	return &Delivered{Store: st, env: map[string]map[string]string{}, sealed: map[string]string{}}
}

// give keeps the secrets of sandbox id that an operation brought.
func (d *Delivered) give(id string, env map[string]string) {
	if id == "" || len(env) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.env[id] = maps.Clone(env)
}

// giveSealed keeps the sealed form of new sandbox id's secrets for the
// write that records it.
func (d *Delivered) giveSealed(id string, env map[string]string, sealed string) {
	d.give(id, env)
	if id == "" || sealed == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sealed[id] = sealed
}

// Grantee is a node store that keeps the grants calls bring
// (internal/nodestore).
type Grantee interface{ Grant(*nodev2.Grant) }

// grant hands gs to the store beneath, when it keeps them (a node of 2.3;
// one on the database needs none).
func (d *Delivered) grant(gs []*nodev2.Grant) {
	g, ok := d.Store.(Grantee)
	if !ok {
		return
	}
	for _, x := range gs {
		g.Grant(x)
	}
}

// forget drops what the node holds of sandbox id's secrets.
func (d *Delivered) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.env, id)
	delete(d.sealed, id)
}

// fill shows r's delivered secrets in it.
func (d *Delivered) fill(r *store.SandboxRecord) {
	if r == nil || len(r.SecretEnv) > 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if env := d.env[r.ID]; env != nil {
		r.SecretEnv = maps.Clone(env)
	}
}

func (d *Delivered) GetSandbox(ctx context.Context, id string) (*store.SandboxRecord, error) {
	r, err := d.Store.GetSandbox(ctx, id)
	d.fill(r)
	return r, err
}

func (d *Delivered) SandboxByName(ctx context.Context, accountID, name string) (*store.SandboxRecord, error) {
	r, err := d.Store.SandboxByName(ctx, accountID, name)
	d.fill(r)
	return r, err
}

func (d *Delivered) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.SandboxRecord, error) {
	rs, err := d.Store.ListSandboxes(ctx, f)
	for _, r := range rs {
		d.fill(r)
	}
	return rs, err
}

// CreateSandboxes writes new records with the sealed form of their
// secrets the control plane sent, and keeps the clear text for the node.
func (d *Delivered) CreateSandboxes(ctx context.Context, rs ...*store.SandboxRecord) error {
	kept := make([]map[string]string, len(rs))
	d.mu.Lock()
	for i, r := range rs {
		if len(r.SecretEnv) == 0 {
			continue
		}
		sealed, ok := d.sealed[r.ID]
		if !ok {
			d.mu.Unlock()
			return fmt.Errorf("sandbox %s has secrets the control plane sent no sealed form of: %w", r.ID, errdefs.ErrInternal)
		}
		kept[i] = r.SecretEnv
		d.env[r.ID] = maps.Clone(r.SecretEnv)
		r.SecretEnv = nil
		r.SetSealedSecrets(sealed)
	}
	d.mu.Unlock()
	defer func() {
		for i, r := range rs {
			if kept[i] != nil {
				r.SecretEnv = kept[i]
			}
		}
	}()
	if err := d.Store.CreateSandboxes(ctx, rs...); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range rs {
		delete(d.sealed, r.ID)
	}
	return nil
}

// UpdateSandbox shows fn the delivered secrets and writes the row with its
// sealed secrets as they were read.
func (d *Delivered) UpdateSandbox(ctx context.Context, id string, fn func(*store.SandboxRecord) error) (*store.SandboxRecord, error) {
	r, err := d.Store.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		d.fill(r)
		err := fn(r)
		r.SecretEnv = nil
		return err
	})
	d.fill(r)
	return r, err
}
