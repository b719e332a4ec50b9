package cli

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const sigWINCH = syscall.SIGWINCH

func windowSize(f *os.File) (rows, cols int, err error) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, err
	}
	if ws.Row == 0 || ws.Col == 0 { // a pseudo-terminal nobody sized yet
		return 24, 80, nil
	}
	return int(ws.Row), int(ws.Col), nil
}

// makeRaw puts the terminal in raw mode (as cfmakeraw(3)): every key goes to
// the sandbox as typed, signals included. restore is idempotent.
func makeRaw(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	done := false
	return func() {
		if !done {
			done = true
			unix.IoctlSetTermios(fd, unix.TCSETS, old)
		}
	}, nil
}
