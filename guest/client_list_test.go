package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
			err := tc.call(c)
			if !errors.Is(err, errdefs.ErrLimitReached) {
				t.Fatalf("%v, want limit_reached", err)
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

// A real listing as large as one reply can carry stays within the limit.
func TestDecodedSizeOfARealListing(t *testing.T) {
	list := make([]FileInfo, 80_000)
	for i := range list {
		name := fmt.Sprintf("file-%06d.txt", i)
		list[i] = FileInfo{Name: name, Path: "/home/user/project/src/generated/" + name, Size: 1234, Mode: "-rw-r--r--", Perm: 0o644, ModTime: time.Now()}
	}
	p, _ := json.Marshal(list)
	if len(p) > maxJSONChunk {
		t.Fatalf("the listing (%d MiB) does not fit one reply", len(p)>>20)
	}
	if err := checkDecodedSize("list", p); err != nil {
		t.Fatal(err)
	}
}
