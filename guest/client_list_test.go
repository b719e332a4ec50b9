package guest

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
)

// A list or ps reply that would decode to more than maxDecodedReply is
// refused (limit_reached) before it is decoded, however small its entries'
// JSON: 16 MiB of "{}" took ~700 MiB of host memory to decode.
func TestHugeListRepliesRefused(t *testing.T) {
	const n = (maxJSONChunk - 2) / 3 // as many "{}," as one reply holds
	flood := "[" + strings.TrimSuffix(strings.Repeat("{},", n), ",") + "]"
	argv := `[{"pid":2,"argv":[` + strings.TrimSuffix(strings.Repeat(`"",`, n-10), ",") + `]}]`
	for name, tc := range map[string]struct {
		reply string
		call  func(c *Client) error
	}{
		"list of empty entries": {flood, func(c *Client) error { _, err := c.List(context.Background(), "/"); return err }},
		"ps of empty entries":   {flood, func(c *Client) error { _, err := c.Processes(context.Background()); return err }},
		"ps of empty argv":      {argv, func(c *Client) error { _, err := c.Processes(context.Background()); return err }},
	} {
		t.Run(name, func(t *testing.T) {
			c := rawGuest(t, func(st *yamux.Stream) { sendChunk(st, chunkResult, []byte(tc.reply)) })
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := tc.call(c)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errdefs.ErrLimitReached) {
				t.Fatalf("%v, want limit_reached", err)
			}
			// Bytes allocated in this process meanwhile, the fake guest's
			// copies of the reply and yamux's buffers included: a few times
			// the reply, where decoding it took over 700 MiB.
			if got := after.TotalAlloc - before.TotalAlloc; got > 16*maxJSONChunk {
				t.Errorf("the call allocated %d MiB", got>>20)
			}
		})
	}
}

// Ordinary replies decode as before: entries, an empty list, null.
func TestListRepliesDecode(t *testing.T) {
	for reply, want := range map[string]int{
		`[{"name":"a","path":"/a","size":1,"mode":"-rw-r--r--","perm":420,"is_dir":false,"mod_time":"2030-01-01T00:00:00Z"},{"name":"b","path":"/b"}]`: 2,
		`[]`:   0,
		`null`: 0,
	} {
		c := rawGuest(t, func(st *yamux.Stream) { sendChunk(st, chunkResult, []byte(reply)) })
		list, err := c.List(context.Background(), "/")
		if err != nil || len(list) != want {
			t.Errorf("%s: %d entries, %v", reply, len(list), err)
		}
	}
	for _, bad := range []string{`{"name":"a"}`, `[{"name":1}]`, `[{}] x`} {
		c := rawGuest(t, func(st *yamux.Stream) { sendChunk(st, chunkResult, []byte(bad)) })
		if _, err := c.List(context.Background(), "/"); !errors.Is(err, errdefs.ErrInternal) {
			t.Errorf("%s: %v, want internal", bad, err)
		}
	}
}

// decodedSize counts objects and members outside strings only.
func TestDecodedSize(t *testing.T) {
	for p, want := range map[string]int{
		`[]`:                    2 + 24,
		`[{},{}]`:               7 + 24 + 2*128 + 24,
		`[{"name":"a\"{,[,{"}]`: 21 + 24 + 128,
		`"{{{{"`:                6,
	} {
		if got := decodedSize([]byte(p)); got != want {
			t.Errorf("decodedSize(%s) = %d, want %d", p, got, want)
		}
	}
}
