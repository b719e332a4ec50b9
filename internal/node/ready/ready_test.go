package ready

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// fakeHost launches VMs of the size and image it is told, per template;
// fail makes its launches fail.
type fakeHost struct {
	mu        sync.Mutex
	image     map[string]string // template → its warm image ("" : not warm)
	size      sandbox.Size
	fail      error
	launched  int
	destroyed []string // VM ids
	links     int      // links given back
	collected int
}

func (f *fakeHost) Current(_ context.Context, k Kind) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img := f.image[k.Template]
	if img == "" {
		return "", fmt.Errorf("template %s: %w", k.Template, ErrNotWarm)
	}
	if k.Cardless {
		img += "-cardless"
	}
	return img, nil
}

func (f *fakeHost) Launch(ctx context.Context, k Kind) (*VM, error) {
	img, err := f.Current(ctx, k)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	f.launched++
	id := fmt.Sprintf("vm-%d", f.launched)
	return &VM{Kind: k, Image: img, Handle: &vmm.Handle{Spec: vmm.Spec{ID: id,
		VCPUs: f.size.VCPUs, MemoryMiB: f.size.MemoryMiB, DiskMiB: f.size.DiskMiB}}}, nil
}

func (f *fakeHost) Destroy(v *VM, withLink bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyed = append(f.destroyed, v.Handle.Spec.ID)
	if withLink {
		f.links++
	}
}

func (f *fakeHost) Collect(context.Context) {
	f.mu.Lock()
	f.collected++
	f.mu.Unlock()
}

// clock is a settable now.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) advance(d time.Duration) { c.now = c.now.Add(d) }

var small = sandbox.Size{VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048}

func newPool(t *testing.T, per int) (*Pool, *fakeHost, *clock) {
	h := &fakeHost{image: map[string]string{"py": "img_py", "go": "img_go"}, size: small}
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p := New(Options{PerKind: per, Idle: 10 * time.Minute, Host: h, Now: c.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return p, h, c
}

// TestTake: a create takes a VM of its kind and size, once; anything else
// finds none.
func TestTake(t *testing.T) {
	py := Kind{Template: "py"}
	tests := []struct {
		name string
		kind Kind
		size sandbox.Size
		want bool
	}{
		{"same kind and size", py, small, true},
		{"another size", py, sandbox.Size{VCPUs: 2, MemoryMiB: 512, DiskMiB: 2048}, false},
		{"another template", Kind{Template: "go"}, small, false},
		{"card-less, none kept", Kind{Template: "py", Cardless: true}, small, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, _ := newPool(t, 1)
			p.Note(py)
			p.round(context.Background())
			v := p.Take("sbx_1", tt.kind, tt.size)
			if (v != nil) != tt.want {
				t.Fatalf("took %v, want a VM: %v", v, tt.want)
			}
			if !tt.want {
				return
			}
			if again := p.Take("sbx_2", tt.kind, tt.size); again != nil {
				t.Fatal("one ready VM taken twice")
			}
			if got := p.Claimed("sbx_1"); got != v {
				t.Fatalf("claimed %v, want the VM taken", got)
			}
			if p.Claimed("sbx_1") != nil {
				t.Fatal("a claim is handed out twice")
			}
		})
	}
}

// TestRefill: the pool keeps PerKind VMs of each kind used lately, fills
// again what creates took, and keeps none while off or for a template
// that is not warm.
func TestRefill(t *testing.T) {
	tests := []struct {
		name  string
		per   int
		kinds []Kind
		take  int // VMs taken before the second round
		want  int // VMs ready after it
	}{
		{"off", 0, []Kind{{Template: "py"}}, 0, 0},
		{"one kind", 2, []Kind{{Template: "py"}}, 0, 2},
		{"two kinds", 2, []Kind{{Template: "py"}, {Template: "py", Cardless: true}}, 0, 4},
		{"taken ones replaced", 2, []Kind{{Template: "py"}}, 2, 2},
		{"not warm", 2, []Kind{{Template: "cold"}}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, h, _ := newPool(t, tt.per)
			ctx := context.Background()
			for _, k := range tt.kinds {
				p.Note(k)
			}
			p.round(ctx)
			for i := range tt.take {
				if p.Take(fmt.Sprint("sbx_", i), tt.kinds[0], small) == nil {
					t.Fatalf("take %d found no VM", i)
				}
			}
			p.round(ctx)
			if n, _, _ := p.Count(); n != tt.want {
				t.Fatalf("%d ready, want %d", n, tt.want)
			}
			if h.launched != tt.want+tt.take {
				t.Errorf("%d launched, want %d", h.launched, tt.want+tt.take)
			}
		})
	}
}

// TestTrim: a kind unused for the idle time loses its VMs, and so does a
// kind whose template was rebuilt (another image) or is no longer warm;
// the images they kept are collected; the others stay.
func TestTrim(t *testing.T) {
	py, goKind := Kind{Template: "py"}, Kind{Template: "go"}
	tests := []struct {
		name   string
		change func(h *fakeHost, c *clock, p *Pool)
		gone   []Kind
	}{
		{"idle", func(h *fakeHost, c *clock, p *Pool) { c.advance(11 * time.Minute); p.Note(goKind) }, []Kind{py}},
		{"rebuilt", func(h *fakeHost, _ *clock, _ *Pool) { h.image["py"] = "img_py2" }, []Kind{py}},
		{"deleted", func(h *fakeHost, _ *clock, _ *Pool) { delete(h.image, "py") }, []Kind{py}},
		{"nothing changed", func(*fakeHost, *clock, *Pool) {}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, h, c := newPool(t, 1)
			ctx := context.Background()
			p.Note(py)
			p.Note(goKind)
			p.round(ctx)
			before := map[Kind]*VM{py: p.VMs(py)[0], goKind: p.VMs(goKind)[0]}
			h.mu.Lock()
			tt.change(h, c, p)
			h.mu.Unlock()
			collected := h.collected
			p.round(ctx)
			for k, v := range before {
				gone := slices.Contains(tt.gone, k)
				if got := slices.Contains(h.destroyed, v.Handle.Spec.ID); got != gone {
					t.Errorf("%v's VM destroyed = %v, want %v", k, got, gone)
				}
				if !gone && (len(p.VMs(k)) != 1 || p.VMs(k)[0] != v) {
					t.Errorf("%v's VM was replaced: %v", k, p.VMs(k))
				}
			}
			if (h.collected > collected) != (len(tt.gone) > 0) {
				t.Errorf("collected %d times after trimming %v", h.collected-collected, tt.gone)
			}
		})
	}
}

// A kind whose launch failed is left alone for the retry pause (or until
// Retry), then tried again.
func TestFailedLaunchWaits(t *testing.T) {
	p, h, c := newPool(t, 1)
	ctx := context.Background()
	py := Kind{Template: "py"}
	p.Note(py)
	h.fail = errors.New("no room")
	p.round(ctx)
	h.fail = nil
	p.round(ctx)
	if n, _, _ := p.Count(); n != 0 {
		t.Fatalf("%d ready within the retry pause, want 0", n)
	}
	c.advance(retryAfter + time.Second)
	p.Note(py)
	p.round(ctx)
	if n, _, _ := p.Count(); n != 1 {
		t.Fatalf("%d ready after the retry pause, want 1", n)
	}
	p.Take("sbx_1", py, small)
	h.fail = errors.New("no room")
	p.round(ctx)
	h.fail = nil
	p.Retry(py)
	p.round(ctx)
	if n, _, _ := p.Count(); n != 1 {
		t.Fatalf("%d ready after Retry, want 1", n)
	}
}

// Drop destroys a VM a failed create took (its link only when asked);
// HandOver and HandedOver pass the agent once and count hits; closing
// destroys every ready VM with its link and collects.
func TestDropHandOverClose(t *testing.T) {
	p, h, _ := newPool(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	py := Kind{Template: "py"}
	p.Note(py)
	p.round(ctx)
	v := p.Take("sbx_1", py, small)
	p.Drop("sbx_1", false)
	if !slices.Contains(h.destroyed, v.Handle.Spec.ID) || h.links != 0 {
		t.Fatalf("drop: destroyed %v, links %d; want the VM, no link", h.destroyed, h.links)
	}
	p.Drop("sbx_1", true) // nothing left to drop
	if len(h.destroyed) != 1 {
		t.Fatalf("a second drop destroyed %v", h.destroyed)
	}
	p.HandOver("sbx_2", nil)
	p.Missed()
	if _, hits, misses := p.Count(); hits != 1 || misses != 1 {
		t.Fatalf("hits %d, misses %d; want 1, 1", hits, misses)
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	cancel()
	<-done
	if n, _, _ := p.Count(); n != 0 || len(h.destroyed) != 2 || h.links != 1 || h.collected == 0 {
		t.Fatalf("after close: %d ready, destroyed %v, links %d, collected %d", n, h.destroyed, h.links, h.collected)
	}
}
