package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A front end (E2B's, which asks for tokens that open envd and the ports)
// gets no data-plane token that outlives the native API's longest, an
// hour, whatever it asks for.
func TestIssueTokenAtMostAnHour(t *testing.T) {
	rig, ids := newPortRig(t, Options{}, []int{1})
	id := ids[0][0]
	for _, ask := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
		before := time.Now()
		tok, err := rig.srv.IssueTokenUntil(context.Background(), id, rig.key[id], before.Add(ask))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := rig.srv.tokens.verify(tok, id, time.Now()); err != nil {
			t.Fatalf("%s: %v", ask, err)
		}
		parts := strings.Split(strings.TrimPrefix(tok, tokenPrefix), ".")
		exp, _ := strconv.ParseInt(parts[3], 10, 64)
		lasts := time.Unix(exp, 0).Sub(before.Truncate(time.Second))
		if want := min(ask, maxTokenTTL); lasts > want {
			t.Errorf("asked for %s: the token lasts %s, want at most %s", ask, lasts, want)
		}
	}
}
