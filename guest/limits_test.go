package guest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/zeish/zeish/errdefs"
)

// rawGuest is a hostile or stuck guest on the other end of a yamux session:
// answer is called for each accepted stream (nil: never accept any).
func rawGuest(t *testing.T, answer func(st *yamux.Stream)) *Client {
	t.Helper()
	host, guest := net.Pipe()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mux, err := yamux.Client(host, muxConfig(log))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := yamux.Server(guest, muxConfig(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close(); srv.Close() })
	if answer != nil {
		go func() {
			for {
				st, err := srv.AcceptStream()
				if err != nil {
					return
				}
				go answer(st)
			}
		}()
	}
	return &Client{conn: host, mux: mux, log: log, streams: make(chan struct{}, maxOpenStreams)}
}

// sendChunk answers a request with one chunk of kind claiming n bytes.
func sendChunk(st *yamux.Stream, kind byte, payload []byte) {
	defer st.Close()
	bufio.NewReader(st).ReadBytes('\n')
	hdr := []byte{kind, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	st.Write(append(hdr, payload...))
}

// A guest that never accepts streams cannot hang the host: every call,
// the 257th and later included, ends when its context does.
func TestCallsHonourContextPastTheStreamBacklog(t *testing.T) {
	c := rawGuest(t, nil)
	const calls = 300
	done := make(chan error, calls)
	for i := 0; i < calls; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := c.Info(ctx)
			done <- err
		}()
	}
	giveUp := time.After(60 * time.Second)
	for i := 0; i < calls; i++ {
		select {
		case err := <-done:
			if !errors.Is(err, errdefs.ErrTimeout) {
				t.Fatalf("call %d: %v, want a timeout", i, err)
			}
		case <-giveUp:
			t.Fatalf("%d of %d calls still blocked long after their context ended", calls-i, calls)
		}
	}
}

// A big reply is held against the shared budget: with the budget taken, a
// call receiving one waits only as long as its context, and allocates
// nothing; a small reply needs no budget.
func TestBigRepliesWaitForBudget(t *testing.T) {
	big := `{"kernel_release":"` + strings.Repeat("x", 2*bigReply) + `"}`
	c := rawGuest(t, func(st *yamux.Stream) { sendChunk(st, chunkResult, []byte(big)) })
	if !replyBudget.TryAcquire(replyBudgetSize) {
		t.Fatal("budget in use")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.Info(ctx)
	cancel()
	if !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("big reply with no budget left: %v, want a timeout", err)
	}
	replyBudget.Release(replyBudgetSize)
	info, err := c.Info(context.Background())
	if err != nil || len(info.KernelRelease) != 2*bigReply {
		t.Fatalf("big reply with budget: %d bytes, %v", len(info.KernelRelease), err)
	}
	if !replyBudget.TryAcquire(replyBudgetSize) {
		t.Fatal("a finished call kept its reply budget")
	}
	replyBudget.Release(replyBudgetSize)
}

// Output and file data come in chunks of at most maxChunk: a guest that
// sends one larger is refused before the host allocates it.
func TestOversizeDataChunkRefused(t *testing.T) {
	c := rawGuest(t, func(st *yamux.Stream) {
		defer st.Close()
		bufio.NewReader(st).ReadBytes('\n')
		st.Write([]byte{chunkStdout, 0, 0xf0, 0, 0}) // claims 15 MiB of stdout
	})
	_, err := c.Exec(context.Background(), ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversize stdout chunk: %v, want refused", err)
	}
}
