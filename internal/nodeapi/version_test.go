package nodeapi

import (
	"errors"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
)

// A control plane works with nodes of its minor version and the one
// before, agreeing on the lower; a node more than one minor behind, or of
// another major version, is refused with a message saying what to do.
func TestAgree(t *testing.T) {
	v := func(major, minor uint32) *nodev2.Version { return &nodev2.Version{Major: major, Minor: minor} }
	cases := []struct {
		ours uint32
		node *nodev2.Version
		want uint32
		err  bool
	}{
		{1, v(2, 1), 1, false},
		{1, v(2, 0), 0, false}, // the previous minor: still works
		{1, v(2, 2), 1, false}, // a newer node is asked only what this side has
		{3, v(2, 2), 2, false},
		{3, v(2, 1), 0, true}, // two behind
		{1, v(1, 9), 0, true},
		{1, v(3, 0), 0, true},
		{1, nil, 0, true}, // a node that sent no version
	}
	for _, c := range cases {
		got, err := agree(c.ours, c.node)
		if (err != nil) != c.err || got != c.want || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("ours 2.%d, node %v: %d %v", c.ours, c.node, got, err)
		}
	}
	if ParseMinor(Format(2, 1)) != 1 || ParseMinor("") != 0 || ParseMinor("2.x") != 0 {
		t.Fatal("ParseMinor")
	}
	if err := needs("n1", 0, MinorGuestReads, "listing ports"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("a 2.1 call on a 2.0 node: %v", err)
	}
}
