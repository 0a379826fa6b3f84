// Command model-teeth replaces, one at a time, the Go body of every
// invariant and liveness property of tla/*.cfg by TRUE in a private copy of
// the module, runs that model's tests, and reports how many tests fail for
// each. It exits non-zero if any property survives (no test fails).
//
//	go run ./cmd/model-teeth [-root .] [-only REGEXP] [-run REGEXP]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/lazaret/lazaret/pkg/model/teeth"
)

func main() {
	root := flag.String("root", ".", "module root holding go.mod, pkg/model and tla")
	only := flag.String("only", "", "measure only properties whose name matches this regular expression")
	run := flag.String("run", "", "passed to go test -run (default: every test of the model package)")
	goTool := flag.String("go", "go", "go command")
	flag.Parse()
	if err := mainErr(*root, *only, *run, *goTool); err != nil {
		fmt.Fprintln(os.Stderr, "model-teeth:", err)
		os.Exit(1)
	}
}

func mainErr(root, only, run, goTool string) error {
	targets, err := teeth.Targets(root)
	if err != nil {
		return err
	}
	var re *regexp.Regexp
	if only != "" {
		if re, err = regexp.Compile(only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	dir, err := teeth.Copy(root, os.TempDir())
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var args []string
	if run != "" {
		args = append(args, "-run", run)
	}
	start := time.Now()
	n, survivors, broken := 0, 0, 0
	for _, t := range targets {
		if re != nil && !re.MatchString(t.Prop) {
			continue
		}
		n++
		r, err := teeth.Run(context.Background(), goTool, dir, t, args...)
		if err != nil {
			return err
		}
		switch {
		case r.Build != "":
			broken++
			fmt.Printf("%-14s %-9s %-42s BUILD FAILED (%s)\n", t.Model.Name, t.Kind, t.Prop, r.Build)
		case r.Survived():
			survivors++
			fmt.Printf("%-14s %-9s %-42s SURVIVED: no test fails (%.1fs)\n", t.Model.Name, t.Kind, t.Prop, r.Duration.Seconds())
		default:
			fmt.Printf("%-14s %-9s %-42s killed: %d failing tests, e.g. %s (%.1fs)\n", t.Model.Name, t.Kind, t.Prop, len(r.Failed), r.Failed[0], r.Duration.Seconds())
		}
	}
	fmt.Printf("model-teeth: %d properties blanked to TRUE, %d killed, %d survivors, %d did not build; %.0fs\n",
		n, n-survivors-broken, survivors, broken, time.Since(start).Seconds())
	if survivors > 0 || broken > 0 {
		return fmt.Errorf("%d survivors, %d build failures", survivors, broken)
	}
	return nil
}
