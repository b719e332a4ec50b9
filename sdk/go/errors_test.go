package zeish

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// The TypeScript SDK reads a status without a code as errdefs's table
// does (errdefs.FromHTTPStatus): the same statuses, the same codes.
func TestTypeScriptStatusCodes(t *testing.T) {
	b, err := os.ReadFile("../ts/src/errors.ts")
	if err != nil {
		t.Fatal(err)
	}
	cases := regexp.MustCompile(`case (\d+): return "([a-z_]+)";`).FindAllStringSubmatch(string(b), -1)
	got := map[int]string{}
	for _, c := range cases {
		status, _ := strconv.Atoi(c[1])
		got[status] = c[2]
	}
	for _, status := range []int{400, 401, 403, 404, 409, 429, 502, 503, 504} {
		if want := errdefs.FromHTTPStatus(status).Code; got[status] != want {
			t.Errorf("sdk/ts codeForStatus(%d) = %q, want %q", status, got[status], want)
		}
	}
	for status, code := range got {
		if want := errdefs.FromHTTPStatus(status).Code; code != want {
			t.Errorf("sdk/ts codeForStatus(%d) = %q, want %q", status, code, want)
		}
	}
}
