// Package teeth measures whether the model tests can tell each property of
// the TLA+ models from TRUE: for every invariant and liveness property that
// tla/*.cfg lists, it makes the property's Go transcription always hold (an
// invariant's method returns true; a liveness property's Avoid predicate
// returns false, so no behaviour can violate it), runs that model package's
// tests and records which fail. A property whose blanking fails no test is a
// survivor: the tests would not notice a wrong or weakened transcription of
// it.
//
// The blanking is a source rewrite in a private copy of the module: every
// property body gets a first statement that returns TRUE when the hook
// variable names it, and a generated file sets that variable from the
// environment variable BlankEnv. One test binary per model is built from the
// copy and run once per property with BlankEnv naming it, which replaces the
// body the checker evaluates without rebuilding each time; the tests never
// see the hook (it exists only in the copy).
package teeth

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// Model names one transcribed TLA+ model: its package directory (relative
// to the module root) and its .cfg.
type Model struct {
	Name string // "Lazaret"
	Dir  string // "pkg/model/lazaret"
	Cfg  string // "tla/Lazaret.cfg"
}

// Models are the models of tla/.
var Models = []Model{
	{Name: "Lazaret", Dir: "pkg/model/lazaret", Cfg: "tla/Lazaret.cfg"},
	{Name: "PreparedLower", Dir: "pkg/model/preparedlower", Cfg: "tla/PreparedLower.cfg"},
}

// Target is one property whose body is replaced by TRUE.
type Target struct {
	Model Model
	Prop  string
	Kind  string // "invariant" or "property"
	File  string // source file (relative to the module root) holding the body
}

// Targets lists every INVARIANTS and PROPERTIES entry of each model's .cfg
// under root and locates its Go body. A listed property whose body cannot
// be found is an error, so no property is silently left unmeasured.
func Targets(root string) ([]Target, error) {
	var out []Target
	for _, m := range Models {
		cfg, err := os.ReadFile(filepath.Join(root, m.Cfg))
		if err != nil {
			return nil, fmt.Errorf("teeth: read %s: %w", m.Cfg, err)
		}
		files, err := filepath.Glob(filepath.Join(root, m.Dir, "*.go"))
		if err != nil {
			return nil, err
		}
		for kind, section := range map[string]string{"invariant": "INVARIANTS", "property": "PROPERTIES"} {
			for _, p := range check.CfgSection(cfg, section) {
				found := ""
				for _, f := range files {
					if strings.HasSuffix(f, "_test.go") {
						continue
					}
					src, err := os.ReadFile(f)
					if err != nil {
						return nil, err
					}
					if _, ok, err := Hook(src, p, kind); err != nil {
						return nil, fmt.Errorf("teeth: %s: %w", f, err)
					} else if ok {
						found = f
						break
					}
				}
				if found == "" {
					return nil, fmt.Errorf("teeth: %s %s of %s has no Go body in %s (a method `func (m *Model) %s(st *State) bool` or a check.Property literal named %q)",
						kind, p, m.Cfg, m.Dir, p, p+"[")
				}
				rel, _ := filepath.Rel(root, found)
				out = append(out, Target{Model: m, Prop: p, Kind: kind, File: rel})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Model.Name != out[j].Model.Name {
			return out[i].Model.Name < out[j].Model.Name
		}
		return out[i].Kind < out[j].Kind // invariants first
	})
	return out, nil
}

// BlankEnv names the property that the hooked test binary blanks.
const BlankEnv = "LAZARET_MODEL_TEETH_BLANK"

// hookVar and hookFile are the hook's identifiers in the copy.
const (
	hookVar   = "teethBlank"
	hookAvoid = "teethAvoid"
	hookFile  = "zz_teeth_hook.go"
)

// Hook returns src with the named property hooked, and whether src holds
// its body. For an invariant the body is the method `func (m *Model)
// Name(st *State) bool`, which gets the first statement
// `if teethBlank == "Name" { return true }`; for a liveness property it is
// each check.Property composite literal whose Name starts with "Name[",
// whose Avoid value f becomes teethAvoid("Name", f) (the predicate false
// when blanked; a literal without Avoid gets one).
func Hook(src []byte, prop, kind string) ([]byte, bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments)
	if err != nil {
		return nil, false, err
	}
	found := false
	name := &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(prop)}
	switch kind {
	case "invariant":
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != prop || fd.Body == nil || fd.Type.Results == nil || len(fd.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fd.Type.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "bool" {
				continue
			}
			guard := &ast.IfStmt{
				Cond: &ast.BinaryExpr{X: ast.NewIdent(hookVar), Op: token.EQL, Y: name},
				Body: &ast.BlockStmt{List: []ast.Stmt{&ast.ReturnStmt{Results: []ast.Expr{ast.NewIdent("true")}}}},
			}
			fd.Body.List = append([]ast.Stmt{guard}, fd.Body.List...)
			found = true
		}
	case "property":
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok || !isPropertyType(cl.Type) {
				return true
			}
			named := false
			avoid := -1
			for i, e := range cl.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, _ := kv.Key.(*ast.Ident)
				if key == nil {
					continue
				}
				switch key.Name {
				case "Name":
					if lit := leftmostString(kv.Value); lit == prop+"[" || lit == prop {
						named = true
					}
				case "Avoid":
					avoid = i
				}
			}
			if !named {
				return true
			}
			var orig ast.Expr = ast.NewIdent("nil")
			if avoid >= 0 {
				orig = cl.Elts[avoid].(*ast.KeyValueExpr).Value
			}
			kv := &ast.KeyValueExpr{Key: ast.NewIdent("Avoid"), Value: &ast.CallExpr{Fun: ast.NewIdent(hookAvoid), Args: []ast.Expr{name, orig}}}
			if avoid >= 0 {
				cl.Elts[avoid] = kv
			} else {
				cl.Elts = append(cl.Elts, kv)
			}
			found = true
			return false
		})
	default:
		return nil, false, fmt.Errorf("unknown kind %q", kind)
	}
	if !found {
		return src, false, nil
	}
	var buf bytes.Buffer
	if err := format.Node(&buf, fset, f); err != nil {
		return nil, false, err
	}
	return buf.Bytes(), true, nil
}

// hookSource is the generated file of a hooked model package.
func hookSource(pkg string) []byte {
	return []byte(`// Code generated by pkg/model/teeth in a private copy; DO NOT EDIT.

package ` + pkg + `

import "os"

var ` + hookVar + ` = os.Getenv("` + BlankEnv + `")

func ` + hookAvoid + `(name string, f func(State) bool) func(State) bool {
	if ` + hookVar + ` == name {
		return func(State) bool { return false }
	}
	return f
}
`)
}

// isPropertyType matches check.Property[State] (or Property[State] inside
// package check).
func isPropertyType(e ast.Expr) bool {
	ix, ok := e.(*ast.IndexExpr)
	if !ok {
		return false
	}
	switch x := ix.X.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == "Property"
	case *ast.Ident:
		return x.Name == "Property"
	}
	return false
}

// leftmostString returns the leftmost string literal of a + concatenation.
func leftmostString(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.BinaryExpr:
			e = x.X
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				s, err := strconv.Unquote(x.Value)
				if err == nil {
					return s
				}
			}
			return ""
		default:
			return ""
		}
	}
}

// Copy copies what the model tests need (go.mod, go.sum, pkg/model and
// tla) from root into a new directory under tmp and returns it.
func Copy(root, tmp string) (string, error) {
	dst, err := os.MkdirTemp(tmp, "model-teeth-")
	if err != nil {
		return "", err
	}
	for _, p := range []string{"go.mod", "go.sum", "pkg/model", "tla"} {
		src := filepath.Join(root, p)
		err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
		})
		if err != nil {
			return "", fmt.Errorf("teeth: copy %s: %w", p, err)
		}
	}
	return dst, nil
}

// Prepare hooks every target in the copy at dir and builds one test binary
// per model package there; it returns the binaries by model name.
func Prepare(ctx context.Context, goTool, dir string, targets []Target) (map[string]string, error) {
	byFile := map[string][]Target{}
	for _, t := range targets {
		byFile[t.File] = append(byFile[t.File], t)
	}
	for file, ts := range byFile {
		path := filepath.Join(dir, file)
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			var ok bool
			if src, ok, err = Hook(src, t.Prop, t.Kind); err != nil || !ok {
				return nil, fmt.Errorf("teeth: hook %s in %s: found %v, %v", t.Prop, file, ok, err)
			}
		}
		if err := os.WriteFile(path, src, 0o644); err != nil {
			return nil, err
		}
	}
	bins := map[string]string{}
	for _, t := range targets {
		if _, ok := bins[t.Model.Name]; ok {
			continue
		}
		pkg := filepath.Base(t.Model.Dir)
		if err := os.WriteFile(filepath.Join(dir, t.Model.Dir, hookFile), hookSource(pkg), 0o644); err != nil {
			return nil, err
		}
		bin := filepath.Join(dir, pkg+".test")
		cmd := exec.CommandContext(ctx, goTool, "test", "-c", "-o", bin, "./"+t.Model.Dir+"/")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("teeth: build the hooked tests of %s: %v\n%s", t.Model.Dir, err, out)
		}
		bins[t.Model.Name] = bin
	}
	return bins, nil
}

// Result is the outcome of running a model's tests with one property
// blanked (or none, for the baseline).
type Result struct {
	Target   Target
	Failed   []string // failing tests (top-level and subtests)
	Err      string   // the binary failed without a failing test (crash, timeout)
	Duration time.Duration
}

// Survived reports whether no test noticed the blanked property.
func (r Result) Survived() bool { return len(r.Failed) == 0 && r.Err == "" }

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// Run runs the hooked test binary of t's model, in its package directory
// of the copy at dir, with t blanked (blank == "" runs the baseline) and
// returns which tests failed.
func Run(ctx context.Context, bin, dir string, t Target, blank string, args ...string) Result {
	res := Result{Target: t}
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-test.count=1", "-test.v", "-test.timeout=10m"}, args...)...)
	cmd.Dir = filepath.Join(dir, t.Model.Dir)
	cmd.Env = append(os.Environ(), BlankEnv+"="+blank)
	out, err := cmd.CombinedOutput()
	res.Duration = time.Since(start)
	for _, m := range failLine.FindAllStringSubmatch(string(out), -1) {
		res.Failed = append(res.Failed, m[1])
	}
	if err != nil && len(res.Failed) == 0 {
		tail := string(out)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		res.Err = fmt.Sprintf("%v: %s", err, tail)
	}
	return res
}
