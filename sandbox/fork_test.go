package sandbox

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// docs/clone.md, rule 1: each child its own name.
func TestChildNames(t *testing.T) {
	cases := []struct {
		name  string
		count int
		want  []string
		err   *errdefs.Error
	}{
		{"", 0, []string{""}, nil},
		{"", 3, []string{"", "", ""}, nil},
		{"web", 0, []string{"web"}, nil},
		{"web", 1, []string{"web"}, nil},
		{"web", 3, []string{"web-1", "web-2", "web-3"}, nil},
		{"web", MaxForkCount, nil, nil},
		{"web", MaxForkCount + 1, nil, errdefs.ErrInvalidArgument},
		{"web", -1, nil, errdefs.ErrInvalidArgument},
		{"Web", 1, nil, errdefs.ErrInvalidArgument},
		{strings.Repeat("a", 62), 2, nil, errdefs.ErrInvalidArgument}, // "-1" makes 64
		{strings.Repeat("a", 61), 2, []string{strings.Repeat("a", 61) + "-1", strings.Repeat("a", 61) + "-2"}, nil},
	}
	for _, c := range cases {
		got, err := ChildNames(c.name, c.count)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("ChildNames(%q, %d) = %v, %v; want %s", c.name, c.count, got, err, c.err.Code)
			}
			continue
		}
		if err != nil || c.want != nil && !reflect.DeepEqual(got, c.want) {
			t.Errorf("ChildNames(%q, %d) = %v, %v; want %v", c.name, c.count, got, err, c.want)
		}
	}
}

// docs/clone.md, rule 4.
func TestInheritAndKeep(t *testing.T) {
	parent := Sandbox{ID: "sbx_p", Name: "parent", AccountID: "acc_1", Template: "base", VCPUs: 2, MemoryMiB: 1024, DiskMiB: 4096,
		Region: "local", Host: "h1", Accel: "tcg", GitRepo: "https://git.example/r", GitBranch: "main", PRNumber: 7,
		MaxCostMicros: 1000, Browser: true, Desktop: false, Env: map[string]string{"A": "1"}, Metadata: map[string]string{"m": "x"}}
	branch, pr, cost, no := "feature", 0, int64(5), false
	cases := []struct {
		name string
		o    ForkOverrides
		want func(c *Sandbox)
	}{
		{"no overrides: the parent's values", ForkOverrides{}, func(c *Sandbox) {
			c.GitBranch, c.PRNumber, c.MaxCostMicros, c.Browser, c.Desktop = "main", 7, 1000, true, false
		}},
		{"every override, zeros included", ForkOverrides{GitBranch: &branch, PRNumber: &pr, MaxCostMicros: &cost, Browser: &no, Desktop: &no},
			func(c *Sandbox) {
				c.GitBranch, c.PRNumber, c.MaxCostMicros, c.Browser, c.Desktop = "feature", 0, 5, false, false
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			child := Sandbox{Name: "kid"}
			Inherit(&child, parent, c.o)
			Keep(&child, parent)
			want := Sandbox{Name: "kid", Hostname: "kid", ParentID: "sbx_p", AccountID: "acc_1", Template: "base",
				VCPUs: 2, MemoryMiB: 1024, DiskMiB: 4096, Region: "local", Host: "h1", Accel: "tcg", GitRepo: "https://git.example/r",
				Env: map[string]string{"A": "1"}, Metadata: map[string]string{"m": "x"}}
			c.want(&want)
			if !reflect.DeepEqual(child, want) {
				t.Fatalf("child\n%+v\nwant\n%+v", child, want)
			}
			// Copies, never shared: a child's env or metadata is its own.
			child.Env["A"], child.Metadata["m"] = "2", "y"
			if parent.Env["A"] != "1" || parent.Metadata["m"] != "x" {
				t.Fatal("the child shares the parent's maps")
			}
		})
	}
}

// docs/sandboxes.md, Names: unique per account among sandboxes not yet destroyed.
func TestCheckNewNames(t *testing.T) {
	taken := map[string]bool{"a": true}
	cases := []struct {
		names []string
		ok    bool
	}{
		{[]string{"b", "c"}, true},
		{[]string{"", ""}, true}, // generated later
		{[]string{"a"}, false},
		{[]string{"b", "b"}, false},
	}
	for _, c := range cases {
		err := CheckNewNames(taken, c.names)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, errdefs.ErrNameTaken) {
			t.Errorf("CheckNewNames(%v) = %v", c.names, err)
		}
	}
}

// docs/snapshots.md, rules 2 and 3.
func TestSnapshotRules(t *testing.T) {
	at := time.Date(2026, 12, 1, 22, 5, 9, 0, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		taken []string
		want  string
	}{
		{nil, "snapshot-20261201-210509"}, // the UTC time
		{[]string{"snapshot-20261201-210508", "mine"}, "snapshot-20261201-210509"},
		{[]string{"snapshot-20261201-210509"}, "snapshot-20261201-210509-2"}, // two in one second
		{[]string{"snapshot-20261201-210509", "snapshot-20261201-210509-2"}, "snapshot-20261201-210509-3"},
	} {
		got := DefaultSnapshotName(at, tc.taken)
		if got != tc.want {
			t.Errorf("default name among %v: %q, want %q", tc.taken, got, tc.want)
		}
		if err := CheckSnapshotName(got); err != nil {
			t.Errorf("the default name %q is invalid: %v", got, err)
		}
	}
	twenty := make([]string, MaxSnapshots)
	for i := range twenty {
		twenty[i] = DefaultSnapshotName(at.Add(time.Duration(i)*time.Second), nil)
	}
	cases := []struct {
		rule     string
		existing []string
		name     string
		err      *errdefs.Error
	}{
		{"rule 2: a new name", []string{"a"}, "b", nil},
		{"rule 2: unique within the sandbox", []string{"a"}, "a", errdefs.ErrNameTaken},
		{"rule 3: at most 20", twenty, "new", errdefs.ErrLimitReached},
		{"rule 3: the limit before the name", twenty, twenty[0], errdefs.ErrLimitReached},
		{"rule 3: 19 leave room", twenty[1:], "new", nil},
	}
	for _, c := range cases {
		err := CheckNewSnapshot("sbx_1", c.existing, c.name)
		if c.err == nil && err != nil || c.err != nil && !errors.Is(err, c.err) {
			t.Errorf("%s: got %v, want %v", c.rule, err, c.err)
		}
	}
	names := []struct {
		name string
		ok   bool
	}{
		{"x", true},
		{strings.Repeat("é", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"tab\there", false},
		{"nul\x00", false},
		{"bad \xff utf8", false},
		{"with spaces and _ / :", true},
	}
	for _, c := range names {
		if err := CheckSnapshotName(c.name); (err == nil) != c.ok || err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckSnapshotName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
