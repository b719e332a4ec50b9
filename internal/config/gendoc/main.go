// Command gendoc writes README's configuration table from config.go
// (go generate ./internal/config).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/zeish/zeish/internal/config/doctable"
)

func main() {
	readme := flag.String("readme", "README.md", "the README to rewrite")
	src := flag.String("src", "config.go", "the file holding config.Config")
	flag.Parse()
	if err := run(*readme, *src); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

func run(readme, src string) error {
	vars, err := doctable.Read(src)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	out, err := doctable.Replace(string(b), doctable.Markdown(vars))
	if err != nil {
		return err
	}
	return os.WriteFile(readme, []byte(out), 0o644)
}
