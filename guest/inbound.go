package guest

import "encoding/binary"

// The host's yamux session is a client: it opens every stream (odd ids) and
// never accepts one. yamux itself would still take streams the guest opens:
// up to its accept backlog (256) of them, each buffering a full receive
// window (256 KiB) that nobody ever reads, about 128 MiB of zeishd's heap
// per sandbox with allocation slack, outside the reply budget, and
// yamux has no setting to refuse them. So the host drops, before yamux sees
// them, whole frames that open a stream (SYN) or belong to a stream the
// guest's side numbered (even ids): such a stream never exists on the host
// and holds nothing. The guest's own yamux waits for an answer that never
// comes, which only costs the guest.

// yamux's frame header (its spec.md): version, type, flags, stream id and
// length, big-endian; a data frame's body is length bytes.
const (
	muxHeaderSize       = 12
	muxTypeData         = 0
	muxTypeWindowUpdate = 1
	muxFlagSYN          = 1
)

// inboundGuard filters the guest's byte stream of one session, frame by
// frame, whatever the chunks it arrives in.
type inboundGuard struct {
	hdr     [muxHeaderSize]byte
	have    int    // bytes of hdr held
	pass    uint32 // body bytes of a kept frame still to come
	skip    uint32 // body bytes of a dropped frame still to come
	dropped int    // frames dropped, for tests and logs
	out     []byte
}

// filter returns what of p yamux may see (valid until the next call).
func (g *inboundGuard) filter(p []byte) []byte {
	g.out = g.out[:0]
	for len(p) > 0 {
		switch {
		case g.skip > 0:
			n := min(uint32(len(p)), g.skip)
			g.skip -= n
			p = p[n:]
		case g.pass > 0:
			n := min(uint32(len(p)), g.pass)
			g.out = append(g.out, p[:n]...)
			g.pass -= n
			p = p[n:]
		default:
			n := copy(g.hdr[g.have:], p)
			g.have += n
			p = p[n:]
			if g.have < muxHeaderSize {
				continue
			}
			g.have = 0
			typ, flags := g.hdr[1], binary.BigEndian.Uint16(g.hdr[2:4])
			id, length := binary.BigEndian.Uint32(g.hdr[4:8]), binary.BigEndian.Uint32(g.hdr[8:12])
			var body uint32
			if typ == muxTypeData {
				body = length
			}
			stream := typ == muxTypeData || typ == muxTypeWindowUpdate
			if stream && (flags&muxFlagSYN != 0 || id != 0 && id%2 == 0) {
				g.dropped++
				g.skip = body
				continue
			}
			g.out = append(g.out, g.hdr[:]...)
			g.pass = body
		}
	}
	return g.out
}
