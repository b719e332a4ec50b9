package imagefs

import (
	"encoding/binary"
	"syscall"
)

// The FUSE wire protocol (linux/fuse.h), the part a read-only folder of
// image files needs. Little-endian, fixed layouts since protocol 7.9; we
// answer INIT with minor 31 and use only structures of that version.

const (
	kernelMajor = 7
	ourMinor    = 31
	minMinor    = 26 // the oldest kernel protocol we serve (Linux 4.20)
)

// Opcodes.
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opAccess      = 34
	opCreate      = 35
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42
	opLseek       = 46
)

// INIT flags we may take (each only if the kernel offers it).
const (
	initAsyncRead      = 1 << 0
	initParallelDirops = 1 << 18
	initMaxPages       = 1 << 22
)

// Open reply flags.
const (
	fopenKeepCache = 1 << 1 // keep the page cache across opens: every VM shares it
	fopenNoFlush   = 1 << 5
)

// notifyResend asks the kernel to send again the requests a server read
// and never answered (Linux 6.9): what a server killed mid-request lost.
const notifyResend = 7

const (
	inHeaderSize  = 40
	outHeaderSize = 16
	attrSize      = 88
	entryOutSize  = 40 + attrSize
	attrOutSize   = 16 + attrSize
	initOutSize   = 64
	openOutSize   = 16
	kstatfsSize   = 80
	direntBase    = 24
)

var le = binary.LittleEndian

// inHeader is the start of every request.
type inHeader struct {
	Len    uint32
	Opcode uint32
	Unique uint64
	NodeID uint64
	UID    uint32
	GID    uint32
	PID    uint32
}

func parseInHeader(b []byte) (inHeader, bool) {
	if len(b) < inHeaderSize {
		return inHeader{}, false
	}
	return inHeader{Len: le.Uint32(b[0:]), Opcode: le.Uint32(b[4:]), Unique: le.Uint64(b[8:]),
		NodeID: le.Uint64(b[16:]), UID: le.Uint32(b[24:]), GID: le.Uint32(b[28:]), PID: le.Uint32(b[32:])}, true
}

// reply builds an answer: header, then payload.
func reply(unique uint64, errno syscall.Errno, payload []byte) []byte {
	b := make([]byte, outHeaderSize+len(payload))
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], uint32(-int32(errno)))
	le.PutUint64(b[8:], unique)
	copy(b[outHeaderSize:], payload)
	return b
}

// notify builds a message the server sends unasked: unique 0, the
// notification's code where a reply has its error.
func notify(code int32, payload []byte) []byte {
	b := reply(0, 0, payload)
	le.PutUint32(b[4:], uint32(code))
	return b
}

// attr is a node's attributes.
type attr struct {
	ino, size, blocks uint64
	mode              uint32
	nlink             uint32
	mtime             uint64
}

func (a attr) put(b []byte) {
	le.PutUint64(b[0:], a.ino)
	le.PutUint64(b[8:], a.size)
	le.PutUint64(b[16:], a.blocks)
	le.PutUint64(b[24:], a.mtime) // atime
	le.PutUint64(b[32:], a.mtime)
	le.PutUint64(b[40:], a.mtime) // ctime
	le.PutUint32(b[60:], a.mode)
	le.PutUint32(b[64:], a.nlink)
	le.PutUint32(b[80:], 4096) // blksize
}

// entryOut answers LOOKUP: the node, valid for a long time (an image
// never changes) for attributes and a second for the name (images come
// and go).
func entryOut(a attr) []byte {
	b := make([]byte, entryOutSize)
	le.PutUint64(b[0:], a.ino) // nodeid
	le.PutUint64(b[16:], 1)    // entry_valid, s
	le.PutUint64(b[24:], attrValidSeconds)
	a.put(b[40:])
	return b
}

const attrValidSeconds = 3600

func attrOut(a attr) []byte {
	b := make([]byte, attrOutSize)
	le.PutUint64(b[0:], attrValidSeconds)
	a.put(b[16:])
	return b
}

func openOut(fh uint64, flags uint32) []byte {
	b := make([]byte, openOutSize)
	le.PutUint64(b[0:], fh)
	le.PutUint32(b[8:], flags)
	return b
}

// dirent appends one READDIR entry; off is the offset of the next.
func dirent(b []byte, ino, off uint64, typ uint32, name string) []byte {
	n := direntBase + len(name)
	pad := (n + 7) &^ 7
	e := make([]byte, pad)
	le.PutUint64(e[0:], ino)
	le.PutUint64(e[8:], off)
	le.PutUint32(e[16:], uint32(len(name)))
	le.PutUint32(e[20:], typ)
	copy(e[direntBase:], name)
	return append(b, e...)
}
