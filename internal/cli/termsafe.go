package cli

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Names, reasons, error messages, file names and process command lines come
// from other accounts' admins, guests and their users: printed as they are,
// a terminal escape sequence in one could retitle the window, rewrite what
// the screen shows, or on some terminals answer back into the shell. So
// everything zeishctl prints for a human, except the bytes a command or a
// file produced (exec, shell, files get: raw by design), goes through
// termSafe.

// termSafe returns s with control characters (C0, DEL, C1), bidi controls
// and invalid UTF-8 written as visible Go-style escapes.
func termSafe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || (r < 0x100 && unicode.IsControl(r)) || unicode.Is(unicode.Bidi_Control, r) {
			return true
		}
	}
	return false
}

// termSafeLines is termSafe line by line: a message's own line breaks stay.
func termSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = termSafe(l)
	}
	return strings.Join(lines, "\n")
}

// termSafeArgs makes printf arguments safe: text (strings, string types,
// errors) goes through termSafe; the rest is left for its verb.
func termSafeArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case error:
			out[i] = termSafe(v.Error())
		default:
			if rv := reflect.ValueOf(a); rv.IsValid() && rv.Kind() == reflect.String {
				out[i] = termSafe(rv.String())
			} else {
				out[i] = a
			}
		}
	}
	return out
}
