package node

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxReasonBytes caps a state reason: reasons quote errors, and errors can
// quote a guest (its agent's messages, its console), which may say anything
// at any length.
const maxReasonBytes = 1024

// cleanReason makes a state reason safe to store and show: control and
// format characters (terminal escapes, bidi overrides) are escaped as Go
// escapes, invalid UTF-8 too, and it is cut at maxReasonBytes.
func cleanReason(s string) string {
	var b strings.Builder
	for i, r := range s {
		if b.Len() >= maxReasonBytes {
			b.WriteString("…")
			break
		}
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
