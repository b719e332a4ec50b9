package guestports

import (
	"slices"
	"testing"
)

// Tables as a Linux guest prints them (trimmed to the columns that count).
const tcp4 = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 102 1 0000000000000000 100 0 0 10 0
   2: 0A00020F:1F90 0A000202:C350 01 00000000:00000000 00:00000000 00000000     0        0 103 1 0000000000000000 20 4 30 10 -1
`

const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 201 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 202 1 0000000000000000 100 0 0 10 0
`

func TestParseAndMerge(t *testing.T) {
	cases := []struct {
		name  string
		table string
		want  []Listener
	}{
		{"ipv4: any address and loopback; an established socket is not listening", tcp4,
			[]Listener{{Port: 8080}, {Port: 3306, Loopback: true}}},
		{"ipv6: any address and ::1", tcp6, []Listener{{Port: 8080}, {Port: 9090, Loopback: true}}},
		{"header only", "  sl  local_address rem_address   st\n", nil},
	}
	for _, c := range cases {
		got, err := Parse([]byte(c.table))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: Parse = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	a, _ := Parse([]byte(tcp4))
	b, _ := Parse([]byte(tcp6))
	want := []Listener{{Port: 3306, Loopback: true}, {Port: 8080}, {Port: 9090, Loopback: true}}
	if got := merge(append(a, b...)); !slices.Equal(got, want) {
		t.Errorf("merge = %v, want %v (8080 on both families once)", got, want)
	}
	if got := merge([]Listener{{Port: 5, Loopback: true}, {Port: 5}}); !slices.Equal(got, []Listener{{Port: 5}}) {
		t.Errorf("a port on loopback and on every address is reachable beyond loopback: %v", got)
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	for _, table := range []string{
		"h\n 0: 00000000 00000000:0000 0A\n",      // no port
		"h\n 0: 00000000:ZZZZ 00000000:0000 0A\n", // not hex
		"h\n 0: 00000000:0000 00000000:0000 0A\n", // port 0
	} {
		if got, err := Parse([]byte(table)); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", table, got)
		}
	}
}
