package guest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
)

// sendFrame answers a call with a frame built beforehand (no copy made
// while the host decodes it).
func sendFrame(st *yamux.Stream, frame []byte) {
	defer st.Close()
	bufio.NewReader(st).ReadBytes('\n')
	st.Write(frame)
}

func frameOf(kind byte, payload string) []byte {
	f := make([]byte, 5+len(payload))
	f[0] = kind
	binary.BigEndian.PutUint32(f[1:], uint32(len(payload)))
	copy(f[5:], payload)
	return f
}

// heapPeak samples the heap while a call runs, every sampleEvery entries.
type heapPeak struct {
	base, peak uint64
	n          int
}

// newHeapPeak starts sampling. Run with a low GC percent (withTightGC):
// HeapAlloc counts garbage not yet collected too.
func newHeapPeak() *heapPeak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &heapPeak{base: ms.HeapAlloc, peak: ms.HeapAlloc}
}

func (h *heapPeak) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.peak = max(h.peak, ms.HeapAlloc)
}

func (h *heapPeak) growthMiB() float64 { return float64(h.peak-h.base) / (1 << 20) }

// A reply as large as a frame carries is decoded entry by entry: the host's
// heap grows by a small fraction of what the buffered List takes for the
// same reply (or, for a flood of "{}", of what it refuses to decode).
func TestStreamedListsHoldOneEntry(t *testing.T) {
	// Collect garbage early, so the heap's peak is about live memory.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	var real strings.Builder
	real.WriteString("[")
	count := 0
	for real.Len() < maxJSONChunk-200 {
		if count > 0 {
			real.WriteString(",")
		}
		fmt.Fprintf(&real, `{"name":"file-%07d.txt","path":"/data/big/file-%07d.txt","size":%d,"mode":"-rw-r--r--","perm":420,"is_dir":false,"mod_time":"2030-01-01T00:00:00Z"}`, count, count, count)
		count++
	}
	real.WriteString("]")
	const floodN = (maxJSONChunk - 2) / 3
	flood := "[" + strings.TrimSuffix(strings.Repeat("{},", floodN), ",") + "]"
	for _, tc := range []struct {
		name  string
		reply string
		want  int
	}{
		{"real listing", real.String(), count},
		{"flood of empty entries", flood, floodN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame, size := frameOf(chunkResult, tc.reply), len(tc.reply)
			tc.reply = "" // only the frame stays
			c := rawGuest(t, func(st *yamux.Stream) { sendFrame(st, frame) })
			hp := newHeapPeak()
			n := 0
			err := c.ListEach(context.Background(), "/data/big", func(fi FileInfo) error {
				if n++; n%20_000 == 0 {
					hp.sample()
				}
				return nil
			})
			hp.sample()
			if err != nil || n != tc.want {
				t.Fatalf("streamed %d entries, %v; want %d", n, err, tc.want)
			}
			streamed := hp.growthMiB()

			hp = newHeapPeak()
			var list []FileInfo
			done := make(chan struct{})
			go func() { // sample the buffered call while it runs
				defer close(done)
				list, err = c.List(context.Background(), "/data/big")
			}()
			for sampling := true; sampling; {
				select {
				case <-done:
					sampling = false
				case <-time.After(5 * time.Millisecond):
					hp.sample()
				}
			}
			hp.sample()
			buffered := hp.growthMiB()
			t.Logf("%d entries, %d MiB reply: heap growth streamed %.1f MiB, buffered %.1f MiB (%d entries, %v)",
				tc.want, size>>20, streamed, buffered, len(list), err)
			// One entry, a read buffer, yamux's 1 MiB window and the GC's
			// slack: well under the reply's 16 MiB that List holds at least.
			if streamed > 12 {
				t.Errorf("streaming took the heap up %.1f MiB for a %d MiB reply", streamed, size>>20)
			}
		})
	}
}

// The streamed decoders read what List and Processes read, and refuse
// what they refuse.
func TestStreamedListsDecode(t *testing.T) {
	huge := `[{"name":"` + strings.Repeat("x", maxStreamedEntry+2*streamRead) + `"}]`
	stop := errors.New("enough")
	for _, tc := range []struct {
		name, reply string
		kind        byte
		want        int
		err         error
		stopAfter   int
	}{
		{"entries", `[{"name":"a","path":"/a","size":1},{"name":"b","path":"/b"}]`, chunkResult, 2, nil, 0},
		{"empty", ` [ ] `, chunkResult, 0, nil, 0},
		{"null", `null`, chunkResult, 0, nil, 0},
		{"not an array", `{"name":"a"}`, chunkResult, 0, errdefs.ErrInternal, 0},
		{"bad entry", `[{"name":1,"pid":"x"}]`, chunkResult, 0, errdefs.ErrInternal, 0},
		{"trailing data", `[{}] x`, chunkResult, 1, errdefs.ErrInternal, 0},
		{"truncated", `[{},{"name":"a"`, chunkResult, 1, errdefs.ErrInternal, 0},
		{"one entry over its limit", huge, chunkResult, 0, errdefs.ErrLimitReached, 0},
		{"guest error", `{"code":"not_found","message":"no such dir"}`, chunkError, 0, errdefs.ErrNotFound, 0},
		{"caller stops", `[{},{},{}]`, chunkResult, 2, stop, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := frameOf(tc.kind, tc.reply)
			c := rawGuest(t, func(st *yamux.Stream) { sendFrame(st, frame) })
			n := 0
			err := c.ListEach(context.Background(), "/", func(FileInfo) error {
				if n++; tc.stopAfter > 0 && n == tc.stopAfter {
					return stop
				}
				return nil
			})
			if n != tc.want || !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
				t.Fatalf("%d entries, %v; want %d, %v", n, err, tc.want, tc.err)
			}
			pn := 0
			err = c.ProcessesEach(context.Background(), func(Process) error { pn++; return nil })
			if tc.stopAfter == 0 && (tc.err == nil) != (err == nil) {
				t.Fatalf("ps: %d entries, %v; want %v", pn, err, tc.err)
			}
		})
	}
	// The budget a big entry took is given back.
	if !replyBudget.TryAcquire(replyBudgetSize) {
		t.Fatal("a streamed call kept reply budget after it ended")
	}
	replyBudget.Release(replyBudgetSize)
}
