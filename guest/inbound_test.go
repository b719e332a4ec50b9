package guest

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// hostileGuest speaks the real channel (frames, HELLO, a yamux server per
// session), answers every call with its agent version, and once a session
// is up opens streams toward the host and fills each one's window.
type hostileGuest struct {
	conn    net.Conn
	streams int
	flooded chan struct{} // closed once every stream was opened and filled
}

func (g *hostileGuest) run(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fr := newFrameReader(g.conn)
	out := &frameWriter{w: g.conn}
	var sess *sessConn
	for {
		f, err := fr.next()
		if err != nil {
			return
		}
		switch {
		case f.kind == frameHello && sess == nil:
			sess = newSessConn(f.session, out)
			mux, err := yamux.Server(sess, muxConfig(log))
			if err != nil {
				t.Error(err)
				return
			}
			go func() {
				for {
					st, err := mux.AcceptStream()
					if err != nil {
						return
					}
					go sendChunk(st, chunkResult, []byte(`{"agent_version":"hostile"}`))
				}
			}()
			go g.flood(mux)
			out.write(frame{kind: frameHelloAck, session: f.session})
		case f.kind == frameData && sess != nil && f.session == sess.id:
			sess.deliver(f.payload)
		}
	}
}

// flood opens g.streams streams and writes a whole initial window on each
// (yamux lets a sender write that much before any answer).
func (g *hostileGuest) flood(mux *yamux.Session) {
	defer close(g.flooded)
	window := bytes.Repeat([]byte{'x'}, 256<<10)
	var wg sync.WaitGroup
	for range g.streams {
		st, err := mux.OpenStream()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.SetWriteDeadline(time.Now().Add(time.Minute))
			st.Write(window)
		}()
	}
	wg.Wait()
}

// A guest that opens streams toward the host (which never accepts any) and
// fills their windows holds none of the host's memory: no such stream
// exists on the host, and calls go on working on the same session.
func TestGuestOpenedStreamsAreRefused(t *testing.T) {
	const streams = 64
	hostConn, guestConn := net.Pipe()
	g := &hostileGuest{conn: guestConn, streams: streams, flooded: make(chan struct{})}
	go g.run(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	heapBefore := heapInUse()
	dialed := false
	c, err := Connect(ctx, func(context.Context) (net.Conn, error) {
		if dialed {
			return nil, io.EOF
		}
		dialed = true
		return hostConn, nil
	}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-g.flooded:
	case <-ctx.Done():
		t.Fatal("the guest could not write its streams' windows")
	}
	// A call after the flood: the host has read every frame before its answer.
	info, err := c.Info(ctx)
	if err != nil || info.AgentVersion != "hostile" {
		t.Fatalf("a call after the flood: %+v %v", info, err)
	}
	grown := int64(heapInUse()) - int64(heapBefore)
	t.Logf("guest opened %d streams with %d KiB each: host heap %+.1f MiB, host streams open %d",
		streams, 256, float64(grown)/(1<<20), c.mux.NumStreams())
	if n := c.mux.NumStreams(); n != 0 {
		t.Fatalf("the host holds %d streams the guest opened (each up to a 256 KiB window)", n)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestInboundGuard: the filter keeps the host's streams and session frames
// and drops the guest's streams, whatever chunks the bytes come in.
func TestInboundGuard(t *testing.T) {
	frameOf := func(typ byte, flags uint16, id uint32, body []byte, length uint32) []byte {
		h := make([]byte, muxHeaderSize)
		h[1] = typ
		binary.BigEndian.PutUint16(h[2:], flags)
		binary.BigEndian.PutUint32(h[4:], id)
		binary.BigEndian.PutUint32(h[8:], length)
		return append(h, body...)
	}
	data := func(flags uint16, id uint32, body string) []byte {
		return frameOf(muxTypeData, flags, id, []byte(body), uint32(len(body)))
	}
	const ack, fin = 2, 4
	kept := [][]byte{
		data(ack, 1, "reply to the host's stream 1"),
		frameOf(muxTypeWindowUpdate, 0, 3, nil, 1<<20),
		frameOf(2, muxFlagSYN, 0, nil, 7), // a ping
		data(fin, 5, ""),
	}
	dropped := [][]byte{
		data(muxFlagSYN, 2, "a stream the guest opens"),
		data(0, 2, "more of it"),
		frameOf(muxTypeWindowUpdate, muxFlagSYN, 4, nil, 0),
		data(muxFlagSYN, 7, "an odd id the host has not opened yet"),
	}
	var stream, want []byte
	for i := range max(len(kept), len(dropped)) {
		if i < len(dropped) {
			stream = append(stream, dropped[i]...)
		}
		if i < len(kept) {
			stream = append(stream, kept[i]...)
			want = append(want, kept[i]...)
		}
	}
	for _, chunk := range []int{1, 5, 12, 13, 64, len(stream)} {
		var g inboundGuard
		var got []byte
		for p := stream; len(p) > 0; {
			n := min(chunk, len(p))
			got = append(got, g.filter(p[:n])...)
			p = p[n:]
		}
		if !bytes.Equal(got, want) || g.dropped != len(dropped) {
			t.Errorf("chunks of %d: kept %q (dropped %d frames), want %q (%d)", chunk, got, g.dropped, want, len(dropped))
		}
	}
}
