package nodeapi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
)

// The node protocol's version (proto/zeish/node/v2): the major version is
// the proto package; each addition raises the minor. A control plane
// works with nodes of its own minor and of the one before (a rolling
// upgrade: control plane first, then the nodes), and asks of each only
// what the minor agreed at its registration has.
const (
	ProtocolMajor = 2
	ProtocolMinor = 3
)

// What each minor version adds, for the calls that need it.
const (
	// MinorGuestReads: ListeningPorts, GitStatus, BrowserVersion,
	// DesktopStatus, BuildTemplate, DeleteTemplate, TemplateEvents and
	// Capacity.image_disk_mib.
	MinorGuestReads = 1
	// MinorImages: CloneImage, and a node that starts, restores and clones
	// sandboxes and snapshots whose images another node made (it fetches
	// them from the image store).
	MinorImages = 2
	// MinorStore: the Control service's store calls; a node of this minor
	// opens no database (internal/nodestore), and the control plane sends
	// a Grant with each operation that reaches a row not on the node.
	MinorStore = 3
)

// Ours is this build's version, as a node sends it.
func Ours() *nodev2.Version { return &nodev2.Version{Major: ProtocolMajor, Minor: ProtocolMinor} }

// Agree is the minor version a control plane speaks with a node that
// offers v: the lower of the two, refused when the node's major differs
// or its minor is more than one behind.
func Agree(v *nodev2.Version) (uint32, error) { return agree(ProtocolMinor, v) }

func agree(ours uint32, v *nodev2.Version) (uint32, error) {
	if v == nil || v.Major != ProtocolMajor {
		got := "none"
		if v != nil {
			got = Format(v.Major, v.Minor)
		}
		return 0, fmt.Errorf("node protocol %s; this control plane speaks %s: run the same major version on both: %w",
			got, Format(ProtocolMajor, ours), errdefs.ErrInvalidArgument)
	}
	if v.Minor+1 < ours {
		return 0, fmt.Errorf("node protocol %s is more than one minor version behind this control plane's %s: upgrade the node: %w",
			Format(v.Major, v.Minor), Format(ProtocolMajor, ours), errdefs.ErrInvalidArgument)
	}
	return min(v.Minor, ours), nil
}

// Format is a version as the node registry keeps it ("2.1").
func Format(major, minor uint32) string { return fmt.Sprintf("%d.%d", major, minor) }

// ParseMinor is the minor of a version Format made (none: 0).
func ParseMinor(v string) uint32 {
	_, minor, ok := strings.Cut(v, ".")
	n, err := strconv.ParseUint(minor, 10, 32)
	if !ok || err != nil {
		return 0
	}
	return uint32(n)
}

// needs refuses a call that a node of minor version minor lacks.
func needs(node string, minor, want uint32, what string) error {
	if minor >= want {
		return nil
	}
	return fmt.Errorf("node %s speaks node protocol %s, and %s needs %s: upgrade the node: %w",
		node, Format(ProtocolMajor, minor), what, Format(ProtocolMajor, want), errdefs.ErrUnavailable)
}
