package procguard

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
	"golang.org/x/tools/go/packages"
)

// TestBinariesObeyTheBroker loads every package the binaries link —
// dependencies included — and fails on any guarded process API outside the
// allow-list, and on any allow-list entry no longer needed.
func TestBinariesObeyTheBroker(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	cfg := &packages.Config{
		Mode:       packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedDeps | packages.NeedImports,
		Dir:        "../..",
		BuildFlags: []string{"-tags=containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"},
		Env:        append([]string{"CGO_ENABLED=0"}, os.Environ()...),
	}
	roots, err := packages.Load(cfg, "./cmd/lazaret", "./cmd/lazaret-cli", "./cmd/lazaret-hc", "./cmd/lazaret-rs", "./cmd/lazaret-gitroute", "./cmd/lazaret-escalate", "./cmd/lazaret-init")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	used := map[string]bool{}
	var violations []string
	var dependencySpawns []string
	packages.Visit(roots, nil, func(p *packages.Package) {
		if seen[p.PkgPath] || !IsProjectOrDependency(p.PkgPath) {
			return
		}
		seen[p.PkgPath] = true
		for _, e := range p.Errors {
			t.Errorf("load %s: %v", p.PkgPath, e)
		}
		if p.Types == nil || p.TypesInfo == nil {
			return
		}
		for _, f := range Findings(p.Types, p.TypesInfo, p.Syntax, p.Fset) {
			if f.Allowed() {
				used[f.Pkg+" "+f.Func] = true
				continue
			}
			if dep, ok := DependencyAllowed[f.Pkg]; ok {
				if _, ok := dep[f.Func]; ok {
					used[f.Pkg+" "+f.Func] = true
					dependencySpawns = append(dependencySpawns, fmt.Sprintf("%s %s", f.Func, f.Pos))
					continue
				}
			}
			violations = append(violations, fmt.Sprintf("%s: %s (%s) in %s", f.Pos, f.Func, f.Kind, f.Pkg))
		}
	})
	if len(seen) < 50 {
		t.Fatalf("only %d packages analysed: the loader did not see the dependency closure", len(seen))
	}
	sort.Strings(violations)
	for _, v := range violations {
		t.Errorf("guarded process API outside the broker: %s", v)
	}
	for pkg, fns := range Allowed {
		for fn := range fns {
			if !used[pkg+" "+fn] {
				t.Errorf("stale allow-list entry %s %s: remove it", pkg, fn)
			}
		}
	}
	for pkg, fns := range DependencyAllowed {
		for fn := range fns {
			if !used[pkg+" "+fn] {
				t.Errorf("stale dependency allow-list entry %s %s: remove it", pkg, fn)
			}
		}
	}
	t.Logf("analysed %d packages; dependency process APIs allowed: %s", len(seen), strings.Join(dependencySpawns, "; "))
}

// TestAnalyzerHasTeeth runs the analyzer on a package full of violations.
func TestAnalyzerHasTeeth(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	analysistest.Run(t, analysistest.TestData(), Analyzer, "bad")
}
