package guest

import (
	"fmt"

	"github.com/zeish/zeish/errdefs"
)

// maxDecodedReply bounds what one JSON reply may decode to on the host. The
// reply itself is held against replyBudget, but what it decodes to is not,
// and a hostile guest can make a value cost a few bytes of JSON ("{}" in a
// list, "" in an argv) for a hundred bytes of Go memory: 16 MiB of "{}," in a
// list reply decoded to ~700 MiB. A real listing as large as one reply
// carries (~80,000 files) stays below it (TestDecodedSizeOfARealListing).
const maxDecodedReply = 64 << 20

// decodedSize estimates, from above for the guest's reply types, the memory
// p decodes to: its own bytes (strings), an object's worth per object and a
// slice slot or field per member. It scans once and allocates nothing.
func decodedSize(p []byte) int {
	const perObject, perValue = 128, 24
	n := len(p)
	inString, escaped := false, false
	for _, b := range p {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch b {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{':
			n += perObject
		case b == ',' || b == '[':
			n += perValue
		}
	}
	return n
}

// checkDecodedSize refuses (limit_reached) a reply that would decode to more
// than maxDecodedReply, before it is decoded.
func checkDecodedSize(op string, p []byte) error {
	if n := decodedSize(p); n > maxDecodedReply {
		return fmt.Errorf("guest %s: the reply would take about %d MiB to decode, over the %d MiB limit (list a smaller directory?): %w",
			op, n>>20, maxDecodedReply>>20, errdefs.ErrLimitReached)
	}
	return nil
}
