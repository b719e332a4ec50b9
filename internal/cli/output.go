package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

// json reports whether the user asked for machine-readable output.
func (a *app) json() bool { return a.output == "json" }

// printJSON writes v as one indented JSON document and nothing else, so
// `-o json | jq` always parses.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns; flush it when done.
func table(w io.Writer, header ...any) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row(tw, header...)
	return tw
}

func row(tw *tabwriter.Writer, cols ...any) {
	for i, c := range cols {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, termSafe(fmt.Sprint(c))) // a tab or newline in a cell would forge columns or rows
	}
	fmt.Fprintln(tw)
}

// printSandboxes prints sandboxes as the list table.
func (a *app) printSandboxes(list []zeish.Sandbox) error {
	tw := table(a.out, "ID", "NAME", "STATE", "TEMPLATE", "VCPUS", "MEM", "CREATED")
	for _, sb := range list {
		row(tw, sb.ID, sb.Name, sb.State, sb.Template, sb.VCPUs, fmt.Sprintf("%dMiB", sb.MemoryMiB), age(sb.CreatedAt))
	}
	return tw.Flush()
}

// printSandbox prints one sandbox: the object with -o json, else a table row.
func (a *app) printSandbox(sb zeish.Sandbox) error {
	if a.json() {
		return a.printJSON(sb)
	}
	return a.printSandboxes([]zeish.Sandbox{sb})
}

// age says how long ago t was, as `kubectl get` does.
func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}
