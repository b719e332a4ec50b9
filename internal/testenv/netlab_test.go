package testenv

import (
	"testing"
)

// TestNetLabSealed proves the lab is closed: its namespaces hold only the
// lab's links and no route out of the lab, and Sealed notices a link that
// would lead elsewhere.
func TestNetLabSealed(t *testing.T) {
	lab := NewNetLab(t)
	if err := lab.Sealed(); err != nil {
		t.Fatal(err)
	}
	// A second link in the node namespace could lead anywhere: refused.
	if err := ipCmd("-n", lab.Node, "link", "add", "zlx0", "type", "veth", "peer", "name", "zlx1"); err != nil {
		t.Fatal(err)
	}
	if err := lab.Sealed(); err == nil {
		t.Error("Sealed passed with an extra link in the node namespace")
	}
	if err := ipCmd("-n", lab.Node, "link", "del", "zlx0"); err != nil {
		t.Fatal(err)
	}
	// A route out of the lab's internet: refused.
	if err := ipCmd("-n", lab.Inet, "route", "add", "192.0.2.0/24", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	if err := lab.Sealed(); err == nil {
		t.Error("Sealed passed with a route out of the lab's internet")
	}
}
