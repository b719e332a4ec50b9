package guest

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"time"
)

// The session layer: everything on the virtio-serial port travels in frames
//
//	magic "ZSH\x01" | kind u8 | session u64 | length u32 | payload CRC32C u32 | header CRC32C u32 | payload
//
// The wire has no notion of connection: a guest resumed in a cloned VM keeps
// reading the same byte stream while a different zeishd writes into it, and
// QEMU drops whatever the guest writes while no host is attached (possibly in
// the middle of a frame). Frames let each side find the start of the next
// valid message (magic + CRCs), and the session id tells the guest that a new
// host has taken over without it ever seeing a disconnect.
const (
	frameMagic      = "ZSH\x01"
	frameHeaderLen  = 25
	maxFramePayload = 4096

	// frameHello is sent by the host every helloInterval until acknowledged.
	// Its payload is maxFramePayload bytes of padding: if a previous host
	// died in the middle of a frame, the guest may be waiting for the rest of
	// a payload, and one padded HELLO is always enough to complete (and then
	// fail the CRC of) that torn frame, so the guest resynchronises at once.
	frameHello    byte = 1
	frameHelloAck byte = 2 // guest → host, same session id
	frameData     byte = 3 // a piece of the yamux byte stream of that session
	// frameReset is the guest's answer to DATA of a session it does not
	// have (the agent restarted, or another host took over): without it
	// that host would wait forever on streams nobody serves.
	frameReset byte = 4
)

// helloInterval is how often the host repeats HELLO during the handshake.
const helloInterval = 100 * time.Millisecond

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var helloPadding = make([]byte, maxFramePayload)

type frame struct {
	kind    byte
	session uint64
	payload []byte
}

// appendFrame encodes f after dst; the payload must fit in one frame.
func appendFrame(dst []byte, f frame) []byte {
	var hdr [frameHeaderLen]byte
	copy(hdr[:4], frameMagic)
	hdr[4] = f.kind
	binary.BigEndian.PutUint64(hdr[5:13], f.session)
	binary.BigEndian.PutUint32(hdr[13:17], uint32(len(f.payload)))
	binary.BigEndian.PutUint32(hdr[17:21], crc32.Checksum(f.payload, crcTable))
	binary.BigEndian.PutUint32(hdr[21:25], crc32.Checksum(hdr[:21], crcTable))
	dst = append(dst, hdr[:]...)
	return append(dst, f.payload...)
}

// frameReader finds valid frames in a byte stream that may contain garbage,
// torn frames and frames of other sessions.
type frameReader struct {
	src io.Reader
	// eofRetry, when non-zero, makes end of file mean "no host attached right
	// now" (a virtio-serial port returns 0 from read then): sleep and retry
	// instead of failing. stop ends the retrying.
	eofRetry time.Duration
	stop     <-chan struct{}

	buf     []byte
	r, w    int
	skipped int64 // bytes dropped while resynchronising, for logs and tests
}

func newFrameReader(src io.Reader) *frameReader {
	return &frameReader{src: src, buf: make([]byte, 8*(frameHeaderLen+maxFramePayload))}
}

// next returns the next valid frame. The payload is a fresh copy.
func (fr *frameReader) next() (frame, error) {
	magic := []byte(frameMagic)
	for {
		if err := fr.need(frameHeaderLen); err != nil {
			return frame{}, err
		}
		data := fr.buf[fr.r:fr.w]
		i := bytes.Index(data, magic)
		switch {
		case i < 0: // keep a tail that may be the start of a magic
			fr.drop(len(data) - (len(magic) - 1))
			continue
		case i > 0:
			fr.drop(i)
			continue
		}
		hdr := data[:frameHeaderLen]
		if crc32.Checksum(hdr[:21], crcTable) != binary.BigEndian.Uint32(hdr[21:25]) {
			fr.drop(1)
			continue
		}
		n := int(binary.BigEndian.Uint32(hdr[13:17]))
		if n > maxFramePayload {
			fr.drop(1)
			continue
		}
		if err := fr.need(frameHeaderLen + n); err != nil {
			return frame{}, err
		}
		data = fr.buf[fr.r:fr.w] // need may have moved the bytes
		payload := data[frameHeaderLen : frameHeaderLen+n]
		if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(data[17:21]) {
			fr.drop(1) // torn frame: rescan from inside it
			continue
		}
		f := frame{
			kind:    data[4],
			session: binary.BigEndian.Uint64(data[5:13]),
			payload: bytes.Clone(payload),
		}
		fr.r += frameHeaderLen + n
		return f, nil
	}
}

func (fr *frameReader) drop(n int) {
	fr.r += n
	fr.skipped += int64(n)
}

// need reads until at least n bytes are buffered.
func (fr *frameReader) need(n int) error {
	for fr.w-fr.r < n {
		if len(fr.buf)-fr.r < n || fr.w == len(fr.buf) {
			copy(fr.buf, fr.buf[fr.r:fr.w])
			fr.w -= fr.r
			fr.r = 0
		}
		m, err := fr.src.Read(fr.buf[fr.w:])
		fr.w += m
		if m > 0 {
			continue
		}
		if err == nil || err == io.EOF {
			if fr.eofRetry == 0 {
				if err == nil {
					continue
				}
				return io.EOF
			}
			select {
			case <-fr.stop:
				return io.EOF
			case <-time.After(fr.eofRetry):
			}
			continue
		}
		return err
	}
	return nil
}
