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
	"strings"
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
	all, err := teeth.Targets(root)
	if err != nil {
		return err
	}
	var re *regexp.Regexp
	if only != "" {
		if re, err = regexp.Compile(only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	var targets []teeth.Target
	for _, t := range all {
		if re == nil || re.MatchString(t.Prop) {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		return fmt.Errorf("no property matches -only %q", only)
	}
	start := time.Now()
	dir, err := teeth.Copy(root, os.TempDir())
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	bins, err := teeth.Prepare(ctx, goTool, dir, all)
	if err != nil {
		return err
	}
	var args []string
	if run != "" {
		args = append(args, "-test.run", run)
	}
	// Baseline: with nothing blanked every test of the hooked copy passes.
	for _, t := range all {
		if _, done := bins["baseline "+t.Model.Name]; done {
			continue
		}
		bins["baseline "+t.Model.Name] = ""
		if r := teeth.Run(ctx, bins[t.Model.Name], dir, t, "", args...); !r.Survived() {
			return fmt.Errorf("baseline of %s fails with nothing blanked (fix the tests first): %v %s", t.Model.Name, r.Failed, r.Err)
		}
	}
	fmt.Printf("model-teeth: baseline passes; built the hooked tests in %.0fs\n", time.Since(start).Seconds())
	n, survivors, broken := 0, 0, 0
	for _, t := range targets {
		n++
		r := teeth.Run(ctx, bins[t.Model.Name], dir, t, t.Prop, args...)
		switch {
		case r.Err != "":
			broken++
			fmt.Printf("%-14s %-9s %-40s ERROR (%s)\n", t.Model.Name, t.Kind, t.Prop, r.Err)
		case r.Survived():
			survivors++
			fmt.Printf("%-14s %-9s %-40s SURVIVED: no test fails (%.1fs)\n", t.Model.Name, t.Kind, t.Prop, r.Duration.Seconds())
		default:
			fmt.Printf("%-14s %-9s %-40s killed by %d failing tests (%.1fs): %s\n", t.Model.Name, t.Kind, t.Prop, len(r.Failed), r.Duration.Seconds(), strings.Join(r.Failed, " "))
		}
	}
	fmt.Printf("model-teeth: %d properties blanked to TRUE, %d killed, %d survivors, %d errors; %.0fs\n",
		n, n-survivors-broken, survivors, broken, time.Since(start).Seconds())
	if survivors > 0 || broken > 0 {
		return fmt.Errorf("%d survivors, %d errors", survivors, broken)
	}
	return nil
}
