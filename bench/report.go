package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// report is what one section measured: the figures (series), the goals
// checked against them, and the tables printed for humans. -o json prints
// reports as they are.
type report struct {
	Section string   `json:"section"`
	Title   string   `json:"title"`
	Series  []series `json:"series"`
	Goals   []goal   `json:"goals,omitempty"`
	Tables  []*table `json:"-"`
	Notes   []string `json:"notes,omitempty"`
}

// series is one measured quantity over several runs.
type series struct {
	Name    string    `json:"name"`
	Unit    string    `json:"unit"` // "ms", "MiB", "bytes", …
	Samples []float64 `json:"samples"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
}

func newSeries(name, unit string, samples []float64) series {
	s := series{Name: name, Unit: unit, Samples: samples}
	if len(samples) > 0 {
		s.Median, s.Min, s.Max = median(samples), slices.Min(samples), slices.Max(samples)
	}
	return s
}

// goal is one target of the issue next to what was measured.
type goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"` // human form, e.g. "≤ 20 %"
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
}

func (r *report) add(s series) series { r.Series = append(r.Series, s); return s }

func (r *report) addGoal(g goal) { r.Goals = append(r.Goals, g) }

// goalsTable renders the goals, if any, as one more table.
func (r *report) goalsTable() *table {
	if len(r.Goals) == 0 {
		return nil
	}
	t := &table{Title: "goals", Header: []string{"goal", "target", "measured", "met"}}
	for _, g := range r.Goals {
		met := "no"
		if g.Met {
			met = "yes"
		}
		t.Rows = append(t.Rows, []string{g.Name, g.Target, fmtNum(g.Value) + " " + g.Unit, met})
	}
	return t
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fmtNum prints a figure with as many decimals as its size deserves.
func fmtNum(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// table is a markdown table.
type table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// statRow is the usual row of a series: name, median, min, max, runs.
func statRow(label string, s series) []string {
	return []string{label, fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max), fmt.Sprint(len(s.Samples))}
}

func statTable(title, unit string) *table {
	return &table{Title: title, Header: []string{"measure", "median " + unit, "min " + unit, "max " + unit, "n"}}
}

// write prints t as a GitHub-flavoured markdown table with padded columns.
func (t *table) write(w io.Writer) {
	width := make([]int, len(t.Header))
	for i, h := range t.Header {
		width[i] = max(3, len([]rune(h))) // a delimiter cell needs a dash besides its colon
	}
	for _, r := range t.Rows {
		for i := range min(len(r), len(width)) {
			width[i] = max(width[i], len([]rune(r[i])))
		}
	}
	line := func(cells []string, numeric bool) {
		var b strings.Builder
		b.WriteString("|")
		for i := range width {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if numeric && i > 0 {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	if t.Title != "" {
		fmt.Fprintf(w, "\n**%s**\n", t.Title)
	}
	fmt.Fprintln(w)
	line(t.Header, false)
	var b strings.Builder
	b.WriteString("|")
	for i, n := range width {
		if i > 0 {
			b.WriteString(" " + strings.Repeat("-", n-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", n) + " |")
		}
	}
	fmt.Fprintln(w, b.String())
	for _, r := range t.Rows {
		line(r, true)
	}
}

// writeMarkdown prints every report: a heading, its tables, its goals, its notes.
func writeMarkdown(w io.Writer, reports []*report) {
	for _, r := range reports {
		fmt.Fprintf(w, "\n## %s (`-only %s`)\n", r.Title, r.Section)
		for _, t := range r.Tables {
			t.write(w)
		}
		if g := r.goalsTable(); g != nil {
			g.write(w)
		}
		if len(r.Notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range r.Notes {
				fmt.Fprintln(w, "- "+n)
			}
		}
	}
}

func writeJSON(w io.Writer, env map[string]any, reports []*report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"environment": env, "reports": reports})
}
