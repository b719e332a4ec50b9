package zeish

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// The TypeScript and Python SDKs read a status without a code as
// errdefs's table does (errdefs.FromHTTPStatus): the same statuses, the
// same codes.
func TestSDKStatusCodes(t *testing.T) {
	for _, sdk := range []struct {
		file string
		row  *regexp.Regexp // a status and its code
	}{
		{"../ts/src/errors.ts", regexp.MustCompile(`case (\d+): return "([a-z_]+)";`)},
		{"../python/zeish/errors.py", regexp.MustCompile(`(?m)^    (\d{3}): "([a-z_]+)",`)},
	} {
		b, err := os.ReadFile(sdk.file)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int]string{}
		for _, c := range sdk.row.FindAllStringSubmatch(string(b), -1) {
			status, _ := strconv.Atoi(c[1])
			got[status] = c[2]
		}
		for _, status := range []int{400, 401, 403, 404, 409, 413, 429, 502, 503, 504} {
			if want := errdefs.FromHTTPStatus(status).Code; got[status] != want {
				t.Errorf("%s: status %d reads as %q, want %q", sdk.file, status, got[status], want)
			}
		}
		for status, code := range got {
			if want := errdefs.FromHTTPStatus(status).Code; code != want {
				t.Errorf("%s: status %d reads as %q, want %q", sdk.file, status, code, want)
			}
		}
	}
}
