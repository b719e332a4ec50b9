package control

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// FuzzTokenVerify: a token verifies only as the signer wrote it, for the
// sandbox it names and before it expires; every refusal is a 401.
func FuzzTokenVerify(f *testing.F) {
	signer := tokenSigner{key: bytes.Repeat([]byte{7}, 32)}
	now := time.Unix(1_800_000_000, 0)
	issue := func(id, acct, key string, exp time.Time) string {
		return signer.issue(&store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, AccountID: acct}}, key, exp)
	}
	good := issue("sbx_a", "acc_1", "key_1", now.Add(time.Hour))
	for _, seed := range []string{
		good, issue("sbx_a", "acc_1", "key_1", now.Add(-time.Second)), issue("sbx_b", "acc_1", "key_1", now.Add(time.Hour)),
		strings.Replace(good, ".acc_1.", ".acc_2.", 1), good + ".", "zdp_", "", "zdp_sbx_a.acc_1.key_1.+1900000000." + signer.mac("sbx_a.acc_1.key_1.+1900000000"),
		"zdp_sbx_a.a.b.c.d.e", strings.Replace(good, "zdp_", "ZDP_", 1),
	} {
		f.Add(seed, "sbx_a")
	}
	f.Fuzz(func(t *testing.T, token, sandboxID string) {
		acct, key, err := signer.verify(token, sandboxID, now)
		if err != nil {
			if errdefs.Of(err).Class != errdefs.ClassUnauthenticated {
				t.Fatalf("%q: %v is not a 401", token, err)
			}
			return
		}
		parts := strings.Split(strings.TrimPrefix(token, tokenPrefix), ".")
		exp, perr := strconv.ParseInt(parts[len(parts)-2], 10, 64)
		if perr != nil || exp <= now.Unix() {
			t.Fatalf("%q verified with expiry %q", token, parts[len(parts)-2])
		}
		if again := issue(sandboxID, acct, key, time.Unix(exp, 0)); again != token {
			t.Fatalf("%q verified for %s as %s/%s, but the signer writes %q", token, sandboxID, acct, key, again)
		}
	})
}
