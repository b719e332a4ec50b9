package guestports

import (
	"strings"
	"testing"
)

// FuzzParse reads arbitrary bytes as a guest's /proc/net/tcp (the guest
// writes it): never a panic, and every listener found has a real port.
func FuzzParse(f *testing.F) {
	header := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	for _, s := range []string{
		header + "   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n",
		header + "   1: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2\n",
		header + "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A\n",
		header + "   0: 00000000:FFFFF 00000000:0000 0A\n", header + "   0: zz:1F90 x 0A\n", header, "", "\n\n\n",
		header + strings.Repeat("x", 70_000) + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, table []byte) {
		ls, err := Parse(table)
		if err != nil {
			return
		}
		for _, l := range ls {
			if l.Port < 1 || l.Port > 65535 {
				t.Fatalf("listener on port %d from %q", l.Port, table)
			}
		}
	})
}
