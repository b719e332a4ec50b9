package server

import (
	"testing"

	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/store"
)

// NewForTest is a server over a Control of st and node (nil: none), its
// token key in dir: how the tests here build one.
func NewForTest(t testing.TB, st store.Store, node control.Node, dir string) *Server {
	t.Helper()
	key, err := control.TokenKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Control: control.New(control.Options{Store: st, Node: node, TokenKey: key})})
}
