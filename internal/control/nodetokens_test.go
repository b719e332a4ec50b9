package control

import (
	"errors"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// A control plane signs the tokens of each node's sandboxes with that
// node's own key (TokenKeyFor): the node holding that key verifies them,
// and no other node, whose key is another, accepts them or can mint one
// the first accepts (SECURITY.md, node identity).
func TestNodeTokensAreTheirNodesOwn(t *testing.T) {
	keys := map[string][]byte{"a": []byte("node a's derived key, 32 bytes.."), "b": []byte("node b's derived key, 32 bytes..")}
	cp := &tokenSigner{key: []byte("the control plane's own key....."), keyFor: func(h string) []byte { return keys[h] }}
	onA := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_1", AccountID: "acc_1", Host: "a"}}
	tok := cp.issue(onA, "key_1", time.Now().Add(time.Minute))
	nodeA, nodeB := &tokenSigner{key: keys["a"]}, &tokenSigner{key: keys["b"]}
	if acct, key, err := nodeA.verify(tok, "sbx_1", time.Now()); err != nil || acct != "acc_1" || key != "key_1" {
		t.Fatalf("node a verifies its sandbox's token: %s %s %v", acct, key, err)
	}
	for name, s := range map[string]*tokenSigner{"node b": nodeB, "the control plane's own key": {key: cp.key}} {
		if _, _, err := s.verify(tok, "sbx_1", time.Now()); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("%s accepted node a's token: %v", name, err)
		}
	}
	// Node b mints a token for a's sandbox with the only key it has.
	forged := nodeB.issue(onA, "key_1", time.Now().Add(time.Minute))
	if _, _, err := nodeA.verify(forged, "sbx_1", time.Now()); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("node a accepted a token node b minted: %v", err)
	}
}
