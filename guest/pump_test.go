//go:build linux

package guest

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"
)

// Output already in the pipe when the process exits is delivered even if
// the drain deadline passed before the pump got to run (a busy guest: the
// load test lost whole outputs of 2 of 32 concurrent execs), while a pipe a
// background child keeps open still ends the pump.
func TestPumpDrainsAfterALateStart(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // a background child holding stdout open
	w.Write([]byte("all of it\n"))
	exited := make(chan struct{})
	close(exited)
	r.SetReadDeadline(time.Now().Add(-time.Second)) // passed before the pump ran
	var out bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	done := make(chan struct{})
	go func() { pump(r, &out, exited, &wg); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("pump never ended with the pipe held open")
	}
	if out.String() != "all of it\n" {
		t.Fatalf("pump delivered %q", out.String())
	}
}
