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

func TestLiveCaptureParts(t *testing.T) {
	log := `time=x level=INFO msg="vm captured live" sandbox=sbx_1 image=/d pause_ms=41 stop_to_seen_ms=2 swap_ms=3 last_pass_ms=30 copy_ms=900 inflate_wait_ms=0 save_ms=80 multifd=true` + "\n" +
		`time=x level=INFO msg="vm captured" sandbox=sbx_2 ms=5` + "\n" +
		`time=x level=INFO msg="vm captured live" sandbox=sbx_3 pause_ms=20 copy_ms=700` + "\n"
	got := liveCaptureParts(log)
	if p := got["pause_ms"]; len(p) != 2 || p[0] != 41 || p[1] != 20 {
		t.Errorf("pause_ms %v, want [41 20]", p)
	}
	if c := got["copy_ms"]; len(c) != 2 || c[1] != 700 {
		t.Errorf("copy_ms %v, want [900 700]", c)
	}
	if s := got["save_ms"]; len(s) != 1 {
		t.Errorf("save_ms %v, want one figure", s)
	}
}

func TestDeltaCaptureParts(t *testing.T) {
	log := `time=x level=INFO msg="vm captured live" sandbox=sbx_1 pause_ms=41 copy_ms=900` + "\n" +
		`time=x level=INFO msg="vm captured by its private pages" sandbox=sbx_2 image=/d pause_ms=14 pages_ms=7 private_mib=10 swap_ms=1 save_ms=3 cont_ms=1 prepare_ms=63 copy_ms=89 image_mib=98` + "\n"
	got := captureParts(log, deltaCaptureRE, deltaParts)
	if p := got["pause_ms"]; len(p) != 1 || p[0] != 14 {
		t.Errorf("pause_ms %v, want [14]", p)
	}
	if p := got["private_mib"]; len(p) != 1 || p[0] != 10 {
		t.Errorf("private_mib %v, want [10]", p)
	}
	if live := liveCaptureParts(log); len(live["pause_ms"]) != 1 || live["pause_ms"][0] != 41 {
		t.Errorf("live pause_ms %v, want [41]", live["pause_ms"])
	}
}
