// Command benchtable renders docs/BENCHMARKS.md from the newest results
// file in bench/results (pkg/benchresult). Run it from the repository
// root: `go run ./scripts/benchtable` (make bench does after measuring);
// -check exits 1, changing nothing, when the document is not what the
// newest results render to.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/benchresult"
)

func main() {
	dir := flag.String("dir", "bench/results", "directory of the results files")
	out := flag.String("out", "docs/BENCHMARKS.md", "document to write")
	check := flag.Bool("check", false, "only check that -out is current")
	flag.Parse()
	if err := run(*dir, *out, *check); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(dir, out string, check bool) error {
	path, f, err := benchresult.Newest(dir)
	if err != nil {
		return err
	}
	// The document names the file as the repository holds it.
	src := "bench/results/" + filepath.Base(path)
	doc, err := benchresult.Render(f, src)
	if err != nil {
		return err
	}
	if check {
		cur, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		if !bytes.Equal(cur, []byte(doc)) {
			return fmt.Errorf("%s is not the table of %s: run go run ./scripts/benchtable", out, src)
		}
		return nil
	}
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s written from %s\n", out, src)
	return nil
}
