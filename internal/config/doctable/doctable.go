// Package doctable renders README's configuration table from the source
// of config.Config: each field's env tag, default and roles, and its doc
// comment. It reads the Go source rather than the compiled struct so that
// the comment a developer writes beside a field is the README's text.
package doctable

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
)

// Begin and End enclose the table in README.
const (
	Begin = "<!-- configuration table: `go generate ./internal/config` writes it from internal/config/config.go -->"
	End   = "<!-- end of the configuration table -->"
)

// Var is one variable as README documents it.
type Var struct {
	Name    string
	Default string // markdown
	Roles   string
	Doc     string
}

// Read returns the variables of the Config struct in the Go file at path,
// in field order.
func Read(path string) ([]Var, error) {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, path, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var st *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
			st, _ = ts.Type.(*ast.StructType)
		}
		return st == nil
	})
	if st == nil {
		return nil, fmt.Errorf("%s: no struct Config", path)
	}
	var out []Var
	for _, field := range st.Fields.List {
		if field.Tag == nil {
			continue
		}
		raw, err := strconv.Unquote(field.Tag.Value)
		if err != nil {
			return nil, err
		}
		tag := reflect.StructTag(raw)
		name := tag.Get("env")
		if name == "" {
			continue
		}
		if field.Doc == nil {
			return nil, fmt.Errorf("%s: field %s has no comment (it is README's description)", path, name)
		}
		v := Var{Name: name, Roles: strings.ReplaceAll(tag.Get("roles"), ",", ", ")}
		var doc []string
		for _, para := range strings.Split(field.Doc.Text(), "\n\n") {
			para = strings.Join(strings.Fields(para), " ")
			if d, ok := strings.CutPrefix(para, "Default: "); ok {
				v.Default = strings.TrimSuffix(d, ".")
				continue
			}
			doc = append(doc, para)
		}
		v.Doc = strings.Join(doc, " ")
		if v.Default == "" {
			v.Default = "none"
			if d := tag.Get("default"); d != "" {
				v.Default = "`" + d + "`"
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// Markdown is the table, between Begin and End.
func Markdown(vars []Var) string {
	var b strings.Builder
	b.WriteString(Begin + "\n")
	b.WriteString("| variable | default | roles | what it does |\n|---|---|---|---|\n")
	for _, v := range vars {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, v.Default, v.Roles, v.Doc)
	}
	b.WriteString(End)
	return b.String()
}

// Replace puts table in place of the one between Begin and End in readme.
func Replace(readme, table string) (string, error) {
	i := strings.Index(readme, Begin)
	j := strings.Index(readme, End)
	if i < 0 || j < i {
		return "", fmt.Errorf("README has no configuration table between %q and %q", Begin, End)
	}
	return readme[:i] + table + readme[j+len(End):], nil
}
