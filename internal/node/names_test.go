package node

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// nameList hands out names in order, then the last one forever, and counts
// how many it gave.
type nameList struct {
	mu    sync.Mutex
	names []string
	given int
}

func (l *nameList) next() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.given++
	if len(l.names) > 1 {
		n := l.names[0]
		l.names = l.names[1:]
		return n
	}
	return l.names[0]
}

// A name the node picked that clashes with a live sandbox (or a sibling)
// is picked again: the caller chose no name, so a clash must not fail its
// create or clone. A name the caller chose still gets name_taken, and a
// node that finds no free name gives up with name_taken, leaving nothing.
func TestPickedNamesAreFree(t *testing.T) {
	names := &nameList{}
	h := newHarness(t, func(o *Options) { o.Names = names.next })
	taken := h.create("brave-otter-10", sandbox.StateRunning)

	set := func(ns ...string) {
		names.mu.Lock()
		names.names, names.given = ns, 0
		names.mu.Unlock()
	}
	create := func(name string) (*store.SandboxRecord, error) {
		return h.n.Create(h.ctx, &store.SandboxRecord{Sandbox: sandbox.Sandbox{Name: name, AccountID: "acc",
			Template: "base", MemoryMiB: 64, DiskMiB: 128, VCPUs: 1}})
	}

	// Create: the first pick is taken, the second is free.
	set("brave-otter-10", "calm-falcon-11")
	r, err := create("")
	if err != nil {
		t.Fatalf("create with a clashing picked name: %v", err)
	}
	r = h.settle(r.ID, sandbox.StateRunning)
	if r.Name != "calm-falcon-11" || r.Hostname != r.Name {
		t.Errorf("created as %q (hostname %q), want calm-falcon-11 for both", r.Name, r.Hostname)
	}

	// Clone into 3: the picks clash with the parent, with each other, then are free.
	set("calm-falcon-11", "eager-badger-12", "eager-badger-12", "fancy-bison-13", "gentle-camel-14", "happy-cobra-15")
	kids := h.clone(r.ID, 3, sandbox.StateRunning)
	var got []string
	for _, k := range kids {
		k = h.get(k.ID)
		if k.Hostname != k.Name {
			t.Errorf("child %s: hostname %q, want its name", k.Name, k.Hostname)
		}
		got = append(got, k.Name)
	}
	slices.Sort(got)
	if want := []string{"fancy-bison-13", "gentle-camel-14", "happy-cobra-15"}; !slices.Equal(got, want) {
		t.Errorf("children named %v, want %v", got, want)
	}

	// A name the caller chose is never replaced.
	if _, err := create(taken.Name); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Errorf("create named %q again: %v, want name_taken", taken.Name, err)
	}

	// No free name within nameAttempts: name_taken, and nothing is left.
	set("brave-otter-10")
	before, err := h.st.ListSandboxes(h.ctx, store.SandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create(""); !errors.Is(err, errdefs.ErrNameTaken) {
		t.Errorf("create with only taken names: %v, want name_taken", err)
	}
	if names.given != nameAttempts {
		t.Errorf("%d names tried, want %d", names.given, nameAttempts)
	}
	after, err := h.st.ListSandboxes(h.ctx, store.SandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("%d sandboxes after a failed create, %d before", len(after), len(before))
	}
	h.deleteAll()
	h.requireNothingLeft()
}
