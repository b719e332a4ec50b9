package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// dnsServer is where the guest's DNS goes: any address on port 53 is
// redirected to zeishd's forwarder, so the gateway's is as good as any.
const dnsServer = "192.0.2.53:53"

// dnsQuery is an A query for name with id (RD set).
func dnsQuery(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0)
	for len(name) > 0 {
		label := name
		if i := indexByte(name, '.'); i >= 0 {
			label, name = name[:i], name[i+1:]
		} else {
			name = ""
		}
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	return append(b, 0, 0, 1, 0, 1)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// dnsFlood sends queries for random names for args[0] seconds, at args[1]
// a second (0 or absent: as fast as it can), counting answers.
func dnsFlood(args []string) error {
	if len(args) < 1 {
		return errors.New("usage: nettool dnsflood SECONDS [QPS]")
	}
	secs, err := strconv.ParseFloat(args[0], 64)
	if err != nil {
		return err
	}
	qps := 0
	if len(args) > 1 {
		if qps, err = strconv.Atoi(args[1]); err != nil {
			return err
		}
	}
	c, err := net.Dial("udp4", dnsServer)
	if err != nil {
		return err
	}
	defer c.Close()
	var answered, refused atomic.Int64
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			if n >= 4 {
				answered.Add(1)
				if buf[3]&0x0f == 5 {
					refused.Add(1)
				}
			}
		}
	}()
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	sent := 0
	for time.Now().Before(end) {
		name := fmt.Sprintf("f%x.flood.test", rand.Uint64())
		if _, err := c.Write(dnsQuery(uint16(sent), name)); err == nil {
			sent++
		}
		if qps > 0 {
			time.Sleep(time.Second / time.Duration(qps))
		}
	}
	time.Sleep(time.Second) // late answers
	fmt.Printf("sent %d answered %d refused %d\n", sent, answered.Load(), refused.Load())
	return nil
}

// dnsLatency resolves args[0] args[1] times, one at a time.
func dnsLatency(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: nettool dnslatency NAME N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	var took []time.Duration
	buf := make([]byte, 4096)
	for i := range n {
		c, err := net.Dial("udp4", dnsServer)
		if err != nil {
			return err
		}
		start := time.Now()
		c.SetDeadline(start.Add(2 * time.Second))
		id := uint16(i)
		if _, err := c.Write(dnsQuery(id, args[0])); err == nil {
			for {
				m, err := c.Read(buf)
				if err != nil {
					break
				}
				if m >= 4 && binary.BigEndian.Uint16(buf) == id {
					took = append(took, time.Since(start))
					break
				}
			}
		}
		c.Close()
	}
	slices.Sort(took)
	ms := func(q float64) float64 {
		if len(took) == 0 {
			return -1
		}
		return float64(took[min(len(took)-1, int(q*float64(len(took))))].Microseconds()) / 1000
	}
	fmt.Printf("ok %d p50_ms %.2f p90_ms %.2f max_ms %.2f\n", len(took), ms(0.5), ms(0.9), ms(1))
	return nil
}
