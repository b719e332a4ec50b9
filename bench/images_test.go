package main

import (
	"slices"
	"testing"
)

// TestImagesSection: the section is registered, and only runs when named
// (it needs versitygw and PostgreSQL, and takes minutes).
func TestImagesSection(t *testing.T) {
	all, err := pick("")
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(all, func(s section) bool { return s.name == "images" }) {
		t.Error("the default run includes images")
	}
	only, err := pick("images")
	if err != nil || len(only) != 1 || only[0].name != "images" || only[0].run == nil {
		t.Fatalf("-only images: %v %v", only, err)
	}
}

// TestImagesLogFigures reads what the images section takes from a node's
// log: a capture's image, a re-fork's private pages and its upload.
func TestImagesLogFigures(t *testing.T) {
	log := `time=x level=INFO msg="capture done" sandbox=sbx_1 image=img_a pause_ms=41` + "\n" +
		`time=x level=INFO msg="capture done" sandbox=sbx_2 image=img_b pause_ms=12` + "\n" +
		`time=x level=INFO msg="vm captured by its private pages" sandbox=sbx_2 image=/data/images/img_b pause_ms=12 pages_ms=3 private_mib=17 private_bytes=18087936 swap_ms=1` + "\n" +
		`time=x level=INFO msg="image durable" image=img_a parent="" uploaded_bytes=90000000 shared_bytes=0 stored_bytes=90000000 seconds=2.1` + "\n" +
		`time=x level=INFO msg="image durable" image=img_b parent=img_a uploaded_bytes=18612224 shared_bytes=250000000 stored_bytes=90000000 seconds=0.4` + "\n"
	for _, tc := range []struct{ key, want string }{{"sbx_1", "img_a"}, {"sbx_2", "img_b"}, {"sbx_3", ""}} {
		if got, ok := logMatch(log, captureImageRE, tc.key); got != tc.want || ok != (tc.want != "") {
			t.Errorf("capture of %s: %q %v, want %q", tc.key, got, ok, tc.want)
		}
	}
	if v, ok := logFigure(log, durableRE, "img_b", "uploaded_bytes"); !ok || v != 18612224 {
		t.Errorf("uploaded bytes of img_b: %v %v", v, ok)
	}
	if v, ok := logFigure(log, privatePagesRE, "img_b", "private_bytes"); !ok || v != 18087936 {
		t.Errorf("private bytes of img_b: %v %v", v, ok)
	}
	if _, ok := logFigure(log, privatePagesRE, "img_a", "private_bytes"); ok {
		t.Error("private bytes of an image not captured by its private pages")
	}
	if got := spread([]float64{3, 1, 2}, "ms"); got != "2.00 ms (1.00–3.00), 3" {
		t.Errorf("spread: %q", got)
	}
}

func TestLinesOf(t *testing.T) {
	log := "a sandbox=sbx_1 x=1\nb sandbox=sbx_12 x=2\nc sandbox=sbx_1 x=3\n"
	if got := linesOf(log, "sbx_1"); got != "a sandbox=sbx_1 x=1\nc sandbox=sbx_1 x=3\n" {
		t.Errorf("linesOf: %q", got)
	}
}
