// Package teeth measures whether the model tests can tell each property of
// the TLA+ models from TRUE: for every invariant and liveness property that
// tla/*.cfg lists, it rewrites the property's Go transcription so that it
// always holds (an invariant's method body becomes `return true`; a liveness
// property's Avoid predicate becomes `false`, so no behaviour can violate it),
// in a private copy of the module, runs that model package's tests there and
// records which tests fail. A property whose rewrite fails no test is a
// survivor: the tests would not notice a wrong or weakened transcription of
// it. The rewrite is applied to the source the checker compiles, so no test
// can see or sidestep it.
package teeth

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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
					if _, ok, err := Blank(src, p, kind); err != nil {
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

// Blank returns src with the body of the named property replaced by TRUE,
// and whether src holds that body. For an invariant the body is the method
// `func (m *Model) Name(st *State) bool`; for a liveness property it is the
// check.Property composite literal whose Name starts with "Name[", whose
// Avoid predicate becomes `func(State) bool { return false }`.
func Blank(src []byte, prop, kind string) ([]byte, bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments)
	if err != nil {
		return nil, false, err
	}
	found := false
	switch kind {
	case "invariant":
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != prop || fd.Type.Results == nil || len(fd.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fd.Type.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "bool" {
				continue
			}
			fd.Body = &ast.BlockStmt{List: []ast.Stmt{&ast.ReturnStmt{Results: []ast.Expr{ast.NewIdent("true")}}}}
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
			never := &ast.FuncLit{
				Type: &ast.FuncType{
					Params:  &ast.FieldList{List: []*ast.Field{{Type: ast.NewIdent("State")}}},
					Results: &ast.FieldList{List: []*ast.Field{{Type: ast.NewIdent("bool")}}},
				},
				Body: &ast.BlockStmt{List: []ast.Stmt{&ast.ReturnStmt{Results: []ast.Expr{ast.NewIdent("false")}}}},
			}
			kv := &ast.KeyValueExpr{Key: ast.NewIdent("Avoid"), Value: never}
			if avoid >= 0 {
				cl.Elts[avoid] = kv
			} else {
				cl.Elts = append(cl.Elts, kv)
			}
			found = true
			return true
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

// Result is the outcome of running a model's tests with one property
// blanked.
type Result struct {
	Target   Target
	Failed   []string // failing tests (top-level and subtests)
	Build    string   // non-empty when the blanked package did not build
	Duration time.Duration
}

// Survived reports whether no test noticed the blanked property.
func (r Result) Survived() bool { return len(r.Failed) == 0 && r.Build == "" }

// Run blanks t in the copy at dir, runs `go test` on its model package
// there with the given extra arguments, restores the file and returns which
// tests failed.
func Run(ctx context.Context, goTool, dir string, t Target, args ...string) (Result, error) {
	res := Result{Target: t}
	path := filepath.Join(dir, t.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	blank, ok, err := Blank(orig, t.Prop, t.Kind)
	if err != nil || !ok {
		return res, fmt.Errorf("teeth: blank %s in %s: found %v, %v", t.Prop, t.File, ok, err)
	}
	if err := os.WriteFile(path, blank, 0o644); err != nil {
		return res, err
	}
	defer os.WriteFile(path, orig, 0o644)
	start := time.Now()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"test", "-count=1", "-json"}, append(args, "./"+t.Model.Dir+"/")...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	res.Duration = time.Since(start)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var buildOut strings.Builder
	for sc.Scan() {
		var ev struct {
			Action, Test, Output string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			buildOut.WriteString(sc.Text() + "\n")
			continue
		}
		if ev.Action == "fail" && ev.Test != "" {
			res.Failed = append(res.Failed, ev.Test)
		}
		if ev.Action == "build-fail" {
			res.Build = "build failed"
		}
	}
	if runErr != nil && len(res.Failed) == 0 {
		res.Build = strings.TrimSpace(stderr.String() + buildOut.String())
		if res.Build == "" {
			res.Build = runErr.Error()
		}
	}
	return res, nil
}
