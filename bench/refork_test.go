package main

import "testing"

func TestCaptureDoneRE(t *testing.T) {
	line := `time=2026-12-01T19:54:54.860Z level=INFO msg="capture done" node=node-x sandbox=sbx_1 image=img_2 pause_ms=41` + "\n" +
		`time=2026-12-01T19:54:55.860Z level=INFO msg="capture done" node=node-x sandbox=sbx_3 image=img_4 pause_ms=7` + "\n"
	m := captureDoneRE.FindAllStringSubmatch(line, -1)
	if len(m) != 2 || m[0][1] != "sbx_1" || m[0][2] != "41" || m[1][1] != "sbx_3" || m[1][2] != "7" {
		t.Fatalf("matches: %q", m)
	}
}
