package sandboxnet

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/vmm"
)

// The managed links need a network.Manager (TAPs, nftables: the e2e
// network tests); these are the rules on a node without networking.

func rec(n *sandbox.Network) *store.SandboxRecord {
	return &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_a", Network: n}, MAC: "52:54:00:00:00:01"}
}

// TestAssignWithoutNetworking: a legacy sandbox gets an identity address,
// one without a card none, one asking for a network a clear refusal.
func TestAssignWithoutNetworking(t *testing.T) {
	tests := []struct {
		name     string
		network  *sandbox.Network
		wantErr  error
		wantAddr string // prefix
		wantNIC  bool
		wantID   bool // the guest is told an identity
	}{
		{"legacy", nil, nil, "10.88.", true, true},
		{"no card", &sandbox.Network{Enabled: false}, nil, "", false, false},
		{"asks for a network", &sandbox.Network{Enabled: true}, errdefs.ErrInvalidArgument, "", false, false},
	}
	l := New(nil, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rec(tt.network)
			err := l.Assign(r, "")
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("assign: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !strings.HasPrefix(r.Address, tt.wantAddr) || (tt.wantAddr == "") != (r.Address == "") {
				t.Errorf("address %q, want %q…", r.Address, tt.wantAddr)
			}
			if l.Managed(r) {
				t.Error("a sandbox on a node without networking counts as managed")
			}
			var spec vmm.Spec
			l.NIC(r, &spec)
			if spec.NoNIC == tt.wantNIC {
				t.Errorf("NoNIC = %v, want a card: %v", spec.NoNIC, tt.wantNIC)
			}
			g := l.Guest(r)
			if (g != nil) != tt.wantID || (g != nil && g.Address != r.Address+"/16") {
				t.Errorf("guest identity %+v for address %s", g, r.Address)
			}
		})
	}
}

// TestChild: a child takes its parent's policy unless it brings one, and
// has a card exactly when its parent has.
func TestChild(t *testing.T) {
	off := &sandbox.Network{Enabled: false}
	tests := []struct {
		name          string
		parent, child *sandbox.Network
		wantErr       error
		wantCard      bool
	}{
		{"legacy parent, nothing asked", nil, nil, nil, true},
		{"card-less parent, nothing asked", off, nil, nil, false},
		{"card-less parent, card-less child", off, &sandbox.Network{Enabled: false}, nil, false},
		{"card-less parent, child asks for a card", off, &sandbox.Network{Enabled: true}, errdefs.ErrInvalidArgument, false},
		{"legacy parent, child asks for a network", nil, &sandbox.Network{Enabled: true}, errdefs.ErrInvalidArgument, false},
		{"parent with a card, child asks for none", &sandbox.Network{Enabled: true}, &sandbox.Network{Enabled: false}, errdefs.ErrInvalidArgument, false},
	}
	l := New(nil, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, c := rec(tt.parent), rec(tt.child)
			err := l.Child(parent, c)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("child: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var spec vmm.Spec
			l.NIC(c, &spec)
			if spec.NoNIC == tt.wantCard {
				t.Errorf("child NoNIC = %v, want a card: %v", spec.NoNIC, tt.wantCard)
			}
			if tt.parent != nil && c.Network == tt.parent {
				t.Error("the child shares its parent's policy instead of a copy")
			}
		})
	}
}
