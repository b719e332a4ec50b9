package sandbox

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// The rules of forks (docs/clone.md), snapshots (docs/snapshots.md) and
// names (docs/sandboxes.md, Names) that need no I/O. The server applies the ones on a request, the node the ones
// on the parent it captured; both call these.

// MaxForkCount bounds the children of one clone call.
const MaxForkCount = 16

// ChildNames returns the names of count children of one clone call
// (docs/clone.md, rule 1: each child its own name): none chosen ("" each, generated
// later), the name itself for one child, name-1 … name-N for several.
// count 0 means 1.
func ChildNames(name string, count int) ([]string, error) {
	if count == 0 {
		count = 1
	}
	if count < 1 || count > MaxForkCount {
		return nil, fmt.Errorf("count %d is outside 1..%d: %w", count, MaxForkCount, errdefs.ErrInvalidArgument)
	}
	out := make([]string, count)
	for i := range out {
		if name == "" {
			continue
		}
		out[i] = name
		if count > 1 {
			out[i] = fmt.Sprintf("%s-%d", name, i+1)
		}
		if err := CheckName(out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ForkOverrides are the fields a clone call may set for its children (docs/clone.md,
// rule 4); nil keeps the parent's value.
type ForkOverrides struct {
	GitBranch     *string
	PRNumber      *int
	MaxCostMicros *int64
	Browser       *bool
	Desktop       *bool
}

// Inherit sets the child's overridable fields (docs/clone.md, rule 4: it
// keeps git_branch, pr_number, max_cost_micros, browser and desktop unless
// the call gives new ones), and a copy of the parent's metadata.
func Inherit(child *Sandbox, parent Sandbox, o ForkOverrides) {
	child.GitBranch, child.PRNumber, child.MaxCostMicros = parent.GitBranch, parent.PRNumber, parent.MaxCostMicros
	child.Browser, child.Desktop = parent.Browser, parent.Desktop
	child.Metadata = maps.Clone(parent.Metadata)
	if child.Metadata == nil {
		child.Metadata = map[string]string{}
	}
	if o.GitBranch != nil {
		child.GitBranch = *o.GitBranch
	}
	if o.PRNumber != nil {
		child.PRNumber = *o.PRNumber
	}
	if o.MaxCostMicros != nil {
		child.MaxCostMicros = *o.MaxCostMicros
	}
	if o.Browser != nil {
		child.Browser = *o.Browser
	}
	if o.Desktop != nil {
		child.Desktop = *o.Desktop
	}
}

// Keep sets the fields a child always has of its parent (docs/clone.md, rule
// 4: always its size, region, host, git repository and environment; rule
// 5: it runs on the parent's host), its lineage
// (parent_id, account, template, accelerator) and a hostname of its own
// name (rule 1). The environment is copied, never shared.
func Keep(child *Sandbox, parent Sandbox) {
	child.ParentID, child.AccountID, child.Template = parent.ID, parent.AccountID, parent.Template
	child.VCPUs, child.MemoryMiB, child.DiskMiB = parent.VCPUs, parent.MemoryMiB, parent.DiskMiB
	child.Region, child.Host, child.Accel = parent.Region, parent.Host, parent.Accel
	child.GitRepo, child.GitPath, child.GitPRRef, child.GitTokenSecret = parent.GitRepo, parent.GitPath, parent.GitPRRef, parent.GitTokenSecret
	child.Env = maps.Clone(parent.Env)
	if child.Env == nil {
		child.Env = map[string]string{}
	}
	child.Hostname = child.Name
}

// CheckNewNames refuses names (of sandboxes about to be made; "" is
// generated later) taken by a live sandbox of the account (docs/sandboxes.md,
// Names: unique per account among sandboxes not yet destroyed) or by each other.
func CheckNewNames(taken map[string]bool, names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" {
			continue
		}
		if taken[n] || seen[n] {
			return fmt.Errorf("a sandbox named %q exists: %w", n, errdefs.ErrNameTaken)
		}
		seen[n] = true
	}
	return nil
}

// DefaultSnapshotName is a snapshot's name when the call gives none
// (docs/snapshots.md, rule 2: snapshot-<UTC YYYYMMDD-HHMMSS>), among the sandbox's
// snapshots named taken: a snapshot takes ~0.1 s, so two in one second
// are common, and the second gets "-2" (then "-3", …) rather than a
// name_taken error for a name the caller never chose.
func DefaultSnapshotName(now time.Time, taken []string) string {
	base := "snapshot-" + now.UTC().Format("20060102-150405")
	name := base
	for i := 2; slices.Contains(taken, name); i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	return name
}

// CheckNewSnapshot refuses a snapshot named name of sandbox id that
// already has the snapshots named existing (docs/snapshots.md, rule 2:
// unique within the sandbox, name_taken; rule 3: at most MaxSnapshots,
// limit_reached). The limit is checked first: with 20 kept, no name helps.
func CheckNewSnapshot(id string, existing []string, name string) error {
	if len(existing) >= MaxSnapshots {
		return fmt.Errorf("sandbox %s has %d snapshots, the most it may keep; delete one first: %w", id, len(existing), errdefs.ErrLimitReached)
	}
	for _, s := range existing {
		if s == name {
			return fmt.Errorf("sandbox %s already has a snapshot named %q: %w", id, name, errdefs.ErrNameTaken)
		}
	}
	return nil
}
