package guest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/yamux"
)

// FuzzFrameReader feeds arbitrary bytes (a hostile guest, a torn stream)
// to the frame reader: it must never panic, never return a frame larger
// than a frame may be, and find every valid frame embedded in garbage.
func FuzzFrameReader(f *testing.F) {
	valid := appendFrame(nil, frame{kind: frameData, session: 7, payload: []byte("hello")})
	f.Add([]byte{}, []byte("hello"))
	f.Add([]byte(frameMagic), []byte{})
	f.Add(valid, []byte("x"))
	f.Add(append([]byte("garbage"+frameMagic), valid[:10]...), []byte("payload"))
	f.Add(bytes.Repeat([]byte(frameMagic), 50), bytes.Repeat([]byte{0xff}, 300))
	f.Fuzz(func(t *testing.T, junk, payload []byte) {
		if len(payload) > maxFramePayload {
			payload = payload[:maxFramePayload]
		}
		want := frame{kind: frameData, session: 42, payload: payload}
		stream := append(append(append([]byte(nil), junk...), appendFrame(nil, want)...), junk...)
		fr := newFrameReader(bytes.NewReader(stream))
		found := false
		for {
			got, err := fr.next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("next: %v", err)
				}
				break
			}
			if len(got.payload) > maxFramePayload {
				t.Fatalf("frame of %d bytes, over %d", len(got.payload), maxFramePayload)
			}
			if got.session == want.session && got.kind == want.kind && bytes.Equal(got.payload, want.payload) {
				found = true
			}
		}
		// Junk before the frame may hold a torn frame header whose claimed
		// length swallows the real one; only a frame after clean junk is
		// guaranteed.
		if !found && !bytes.Contains(junk, []byte(frameMagic)) {
			t.Fatalf("valid frame lost in %d bytes of junk", len(junk))
		}
	})
}

// FuzzReadChunk reads arbitrary bytes as a call's chunk stream: never a
// panic, never a data chunk over maxChunk or any chunk over maxJSONChunk,
// and what chunkWriter wrote reads back the same.
func FuzzReadChunk(f *testing.F) {
	var buf bytes.Buffer
	cw := &chunkWriter{w: &buf}
	cw.chunk(chunkStdout, []byte("out"))
	cw.json(chunkResult, map[string]int{"exit_code": 0})
	f.Add(buf.Bytes(), []byte("data"))
	f.Add([]byte{chunkStdout, 0xff, 0xff, 0xff, 0xff}, []byte{})
	f.Add([]byte{chunkResult, 0, 0x10, 0, 1}, []byte("{}"))
	f.Fuzz(func(t *testing.T, stream, data []byte) {
		r := bufio.NewReader(bytes.NewReader(stream))
		var b []byte
		for {
			kind, p, err := readChunk(r, b)
			if err != nil {
				break
			}
			b = p
			switch kind {
			case chunkData, chunkStdout, chunkStderr, chunkEOF:
				if len(p) > maxChunk {
					t.Fatalf("%q chunk of %d bytes", kind, len(p))
				}
			}
			if len(p) > maxJSONChunk {
				t.Fatalf("chunk of %d bytes", len(p))
			}
		}
		var out bytes.Buffer
		if err := (&chunkWriter{w: &out}).chunk(chunkData, data); err != nil {
			t.Fatal(err)
		}
		r = bufio.NewReader(&out)
		var got []byte
		for {
			kind, p, err := readChunk(r, nil)
			if err != nil {
				break
			}
			if kind != chunkData {
				t.Fatalf("kind %q", kind)
			}
			got = append(got, p...)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("round trip: %d bytes in, %d out", len(data), len(got))
		}
	})
}

// FuzzListReplies answers a list and a ps call with arbitrary bytes as the
// result (what a hostile guest can send): the streamed decoders (ListEach,
// ProcessesEach) and the whole ones (List, Processes) never panic, fail
// or decode, and agree on the entries when both decode.
func FuzzListReplies(f *testing.F) {
	for _, s := range []string{`[]`, `null`, `[{"name":"a","size":1,"mode":420,"is_dir":false}]`, `[{"pid":1,"argv":["init"]}]`,
		`[{}, {}, {}]`, `[`, `[1,2]`, `{"a":1}`, `[] []`, `[{"name":"` + string(make([]byte, 70_000)) + `"}]`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		answer := func(st *yamux.Stream) { sendChunk(st, chunkResult, body) }
		ctx := context.Background()
		check := func(what string, streamed, whole int, errS, errW error) {
			if errS == nil && errW == nil && streamed != whole {
				t.Fatalf("%s of %q: %d entries streamed, %d whole", what, body, streamed, whole)
			}
		}
		c := rawGuest(t, answer)
		n := 0
		errS := c.ListEach(ctx, "/", func(FileInfo) error { n++; return nil })
		list, errW := c.List(ctx, "/")
		check("list", n, len(list), errS, errW)
		n = 0
		errS = c.ProcessesEach(ctx, func(Process) error { n++; return nil })
		ps, errW := c.Processes(ctx)
		check("ps", n, len(ps), errS, errW)
	})
}
