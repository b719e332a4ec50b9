package guest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// resolvConfBlock is what resolv.conf is padded to a multiple of, so that
// the next rewrite (a fork child's new name server) has the same size.
const resolvConfBlock = 128

// resolvConfPad closes the file: a comment padded with spaces.
const resolvConfPad = "# written by zeish sandboxd"

// resolvConf is the file naming servers, padded to a multiple of
// resolvConfBlock bytes.
func resolvConf(servers []string) []byte {
	var b bytes.Buffer
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	b.WriteString(resolvConfPad)
	size := (b.Len() + 1 + resolvConfBlock - 1) / resolvConfBlock * resolvConfBlock
	b.WriteString(strings.Repeat(" ", size-b.Len()-1))
	b.WriteByte('\n')
	return b.Bytes()
}

// updateResolvConf makes the file at path name servers. A reader never
// sees it half written: a file of another size is replaced by rename, one
// of the same size (every rewrite after the first: a fork child's new
// gateway) is overwritten in one write, without truncating it, so its
// size never changes either. Under TCG a fork child runs the rename's
// file-system paths (a new inode, the old one's release) for the first
// time, tens of milliseconds; the write in place takes the paths that
// writing /etc/hostname just took. Nothing is written when the file says
// it already (a restore, a boot).
func updateResolvConf(path string, servers []string) error {
	want := resolvConf(servers)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		defer f.Close()
		have := make([]byte, len(want)+1)
		n, _ := f.ReadAt(have, 0)
		if bytes.Equal(have[:n], want) {
			return nil
		}
		if n == len(want) {
			if _, err := f.WriteAt(want, 0); err != nil {
				return err
			}
			return nil
		}
	}
	tmp := path + ".zeish"
	if err := os.WriteFile(tmp, want, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
