//go:build !linux

package cli

import (
	"errors"
	"os"
	"syscall"
)

// sigWINCH is never delivered here: shell refuses to start first.
const sigWINCH = syscall.Signal(28)

var errNoShell = errors.New("zeishctl shell is supported on Linux only")

func windowSize(*os.File) (int, int, error) { return 0, 0, errNoShell }

func makeRaw(*os.File) (func(), error) { return nil, errNoShell }
