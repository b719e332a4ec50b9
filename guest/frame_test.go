package guest

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestFrameReader(t *testing.T) {
	hello := frame{kind: frameHello, session: 7, payload: helloPadding}
	data := frame{kind: frameData, session: 7, payload: []byte("yamux bytes")}
	enc := func(fs ...frame) []byte {
		var b []byte
		for _, f := range fs {
			b = appendFrame(b, f)
		}
		return b
	}
	corrupt := enc(data)
	corrupt[len(corrupt)-1] ^= 0xff
	torn := enc(frame{kind: frameData, session: 9, payload: make([]byte, 3000)})[:500]

	tests := []struct {
		name    string
		in      []byte
		want    []frame
		skipped bool
	}{
		{"clean", enc(hello, data), []frame{hello, data}, false},
		{"garbage first", append([]byte("\x00ZSH\x01ZS\xff junk"), enc(data)...), []frame{data}, true},
		{"bad payload crc", append(corrupt, enc(data)...), []frame{data}, true},
		{"torn frame then padded hello", append(torn, enc(hello, data)...), []frame{hello, data}, true},
		{"magic split at the end", append(enc(data), "ZSH"...), []frame{data}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte per read: frames must survive any split.
			fr := newFrameReader(iotest.OneByteReader(bytes.NewReader(tt.in)))
			for i, want := range tt.want {
				got, err := fr.next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if got.kind != want.kind || got.session != want.session || !bytes.Equal(got.payload, want.payload) {
					t.Fatalf("frame %d = %d/%d/%q, want %d/%d/%q", i, got.kind, got.session, got.payload, want.kind, want.session, want.payload)
				}
			}
			if _, err := fr.next(); !errors.Is(err, io.EOF) {
				t.Fatalf("after the frames: %v, want EOF", err)
			}
			if (fr.skipped > 0) != tt.skipped {
				t.Errorf("skipped %d bytes", fr.skipped)
			}
		})
	}
}
