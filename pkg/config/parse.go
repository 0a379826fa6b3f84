package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/suggest"
)

// Error is one configuration problem at a place in the file.
type Error struct {
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	// Key is the dotted key the problem is about ("" for the file).
	Key string `json:"key,omitempty"`
	// Msg says what is wrong and how to fix it.
	Msg string `json:"message"`
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one configuration, in file order. It is
// marked errdefs.ErrInvalid.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	if len(es) == 1 {
		return "invalid configuration: " + lines[0]
	}
	return fmt.Sprintf("invalid configuration (%d problems):\n  %s", len(es), strings.Join(lines, "\n  "))
}

func (es Errors) Is(target error) bool { return target == errdefs.ErrInvalid }

// AsErrors returns the configuration problems in err, if any.
func AsErrors(err error) (Errors, bool) {
	var es Errors
	ok := errors.As(err, &es)
	return es, ok
}

// pathKey is a path in the document: table keys and "[i]" array indices.
type pathKey string

func mkpath(parts ...string) pathKey { return pathKey(strings.Join(parts, "\x1f")) }

func (p pathKey) child(k string) pathKey {
	if p == "" {
		return pathKey(k)
	}
	return p + "\x1f" + pathKey(k)
}

func (p pathKey) index(i int) pathKey { return p.child(fmt.Sprintf("[%d]", i)) }

// String renders the path as a TOML dotted key with indices.
func (p pathKey) String() string {
	if p == "" {
		return ""
	}
	var b strings.Builder
	for i, part := range strings.Split(string(p), "\x1f") {
		switch {
		case strings.HasPrefix(part, "["):
			b.WriteString(part)
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			if bareKey(part) {
				b.WriteString(part)
			} else {
				fmt.Fprintf(&b, "%q", part)
			}
		}
	}
	return b.String()
}

func bareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

type position struct{ line, col int }

// positions maps every key and value of a document to its position.
type positions map[pathKey]position

// indexPositions walks the document with go-toml's parser and records the
// position of every key (at the key) and value (at "<key>#v" and at each
// array element's index). The document has already been decoded, so it is
// well formed.
func indexPositions(data []byte) positions {
	idx := positions{}
	var p unstable.Parser
	p.Reset(data)
	arrayTables := map[pathKey]int{}
	var table pathKey
	shape := func(n *unstable.Node) (position, bool) {
		for n != nil {
			if n.Raw.Length > 0 {
				s := p.Shape(n.Raw)
				return position{s.Start.Line, s.Start.Column}, true
			}
			n = n.Child()
		}
		return position{}, false
	}
	var value, kv func(path pathKey, n *unstable.Node)
	value = func(path pathKey, n *unstable.Node) {
		if pos, ok := shape(n); ok {
			if _, seen := idx[path+"#v"]; !seen {
				idx[path+"#v"] = pos
			}
		}
		switch n.Kind {
		case unstable.Array:
			it := n.Children()
			for i := 0; it.Next(); i++ {
				c := it.Node()
				if pos, ok := shape(c); ok {
					idx[path.index(i)] = pos
				}
				value(path.index(i), c)
			}
		case unstable.InlineTable:
			it := n.Children()
			for it.Next() {
				kv(path, it.Node())
			}
		}
	}
	keyParts := func(n *unstable.Node) ([]string, []*unstable.Node) {
		var parts []string
		var nodes []*unstable.Node
		it := n.Key()
		for it.Next() {
			parts = append(parts, string(it.Node().Data))
			nodes = append(nodes, it.Node())
		}
		return parts, nodes
	}
	kv = func(base pathKey, n *unstable.Node) {
		parts, nodes := keyParts(n)
		path := base
		for i, part := range parts {
			path = path.child(part)
			if pos, ok := shape(nodes[i]); ok {
				if _, seen := idx[path]; !seen {
					idx[path] = pos
				}
			}
		}
		value(path, n.Value())
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, nodes := keyParts(e)
			path := pathKey("")
			for i, part := range parts {
				path = path.child(part)
				last := i == len(parts)-1
				if last && e.Kind == unstable.ArrayTable {
					arrayTables[path]++
				}
				pos, ok := shape(nodes[i])
				if ok {
					if _, seen := idx[path]; !seen {
						idx[path] = pos
					}
				}
				if n, isArray := arrayTables[path]; isArray {
					path = path.index(n - 1)
					if ok {
						if _, seen := idx[path]; !seen {
							idx[path] = pos
						}
					}
				}
			}
			table = path
		case unstable.KeyValue:
			kv(table, e)
		}
	}
	return idx
}

// doc is a decoded document with positions, collecting errors.
type doc struct {
	file string
	pos  positions
	errs Errors
}

// errorf records a problem at path (its value position when valueAt).
func (d *doc) errorf(path pathKey, format string, args ...any) {
	d.errAt(path, false, format, args...)
}

func (d *doc) valueErrorf(path pathKey, format string, args ...any) {
	d.errAt(path, true, format, args...)
}

func (d *doc) errAt(path pathKey, valueAt bool, format string, args ...any) {
	e := &Error{File: d.file, Key: path.String(), Msg: fmt.Sprintf(format, args...)}
	if pos, ok := d.lookup(path, valueAt); ok {
		e.Line, e.Column = pos.line, pos.col
	}
	d.errs = append(d.errs, e)
}

func (d *doc) lookup(path pathKey, valueAt bool) (position, bool) {
	if valueAt {
		if pos, ok := d.pos[path+"#v"]; ok {
			return pos, true
		}
	}
	for p := path; p != ""; {
		if pos, ok := d.pos[p]; ok {
			return pos, true
		}
		i := strings.LastIndex(string(p), "\x1f")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return position{}, false
}

// line returns the line of path ("" when unknown) for messages naming two
// entries.
func (d *doc) where(path pathKey) string {
	if pos, ok := d.lookup(path, true); ok {
		return fmt.Sprintf("line %d", pos.line)
	}
	return "built in"
}

// decodeTOML parses data into a generic tree, translating syntax errors.
func decodeTOML(file string, data []byte) (map[string]any, Errors) {
	var tree map[string]any
	err := toml.Unmarshal(data, &tree)
	if err == nil {
		if tree == nil {
			tree = map[string]any{}
		}
		return tree, nil
	}
	e := &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
	var de *toml.DecodeError
	if dup := findDuplicate(data); dup != nil && !errors.As(err, &de) {
		dup.File = file
		return nil, Errors{dup}
	}
	if errors.As(err, &de) {
		e.Line, e.Column = de.Position()
		e.Key = strings.Join(de.Key(), ".")
		e.Msg = strings.TrimPrefix(de.Error(), "toml: ")
		switch {
		case strings.Contains(e.Msg, "already"), strings.Contains(e.Msg, "duplicate"):
			if strings.HasPrefix(e.Key, "profiles.") && strings.Count(e.Key, ".") == 1 {
				e.Msg += fmt.Sprintf(": profile %q is defined twice; merge the two [%s] tables into one", strings.TrimPrefix(e.Key, "profiles."), e.Key)
			} else {
				e.Msg += ": each key and table may appear once; remove or merge the repeated one"
			}
		default:
			e.Msg += ": fix the TOML syntax (https://toml.io/en/v1.0.0)"
		}
	}
	return nil, Errors{e}
}

// keys returns a table's keys sorted by position, then name.
func (d *doc) keys(path pathKey, t map[string]any) []string {
	ks := make([]string, 0, len(t))
	for k := range t {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		pi, _ := d.lookup(path.child(ks[i]), false)
		pj, _ := d.lookup(path.child(ks[j]), false)
		if pi != pj {
			return pi.line < pj.line || pi.line == pj.line && pi.col < pj.col
		}
		return ks[i] < ks[j]
	})
	return ks
}

func (d *doc) unknown(path pathKey, key string, allowed []string) {
	meant := ""
	if near := suggest.Nearest(allowed, key); near != "" {
		meant = fmt.Sprintf(" (did you mean %q?)", near)
	}
	d.errorf(path.child(key), "unknown key %q%s: the keys allowed here are %s (see docs/CONFIG.md)", key, meant, strings.Join(allowed, ", "))
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

func (d *doc) str(path pathKey, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.valueErrorf(path, "must be a string, not %s", typeName(v))
	}
	return s, ok
}

func (d *doc) boolean(path pathKey, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		d.valueErrorf(path, "must be true or false, not %s", typeName(v))
	}
	return b, ok
}

func (d *doc) table(path pathKey, v any) (map[string]any, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		d.valueErrorf(path, "must be a table, not %s", typeName(v))
	}
	return t, ok
}

// strings decodes an array of strings; elements of the wrong type are
// reported and skipped. The returned paths address each element.
func (d *doc) strs(path pathKey, v any) ([]string, []pathKey) {
	a, ok := v.([]any)
	if !ok {
		d.valueErrorf(path, "must be an array of strings, not %s", typeName(v))
		return nil, nil
	}
	var out []string
	var paths []pathKey
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			d.valueErrorf(path.index(i), "must be a string, not %s", typeName(e))
			continue
		}
		out = append(out, s)
		paths = append(paths, path.index(i))
	}
	return out, paths
}

// findDuplicate finds a table or key defined twice (go-toml reports these
// without a position). It covers the common shapes: a repeated [table]
// header and a repeated key in one table.
func findDuplicate(data []byte) *Error {
	var p unstable.Parser
	p.Reset(data)
	arrayTables := map[pathKey]int{}
	tables := map[pathKey]int{} // explicit [table] headers → line
	keys := map[pathKey]int{}   // key/value pairs → line
	var table pathKey
	line := func(n *unstable.Node) (int, int) {
		for ; n != nil; n = n.Child() {
			if n.Raw.Length > 0 {
				sh := p.Shape(n.Raw)
				return sh.Start.Line, sh.Start.Column
			}
		}
		return 0, 0
	}
	for p.NextExpression() {
		e := p.Expression()
		var parts []string
		var first *unstable.Node
		it := e.Key()
		for it.Next() {
			if first == nil {
				first = it.Node()
			}
			parts = append(parts, string(it.Node().Data))
		}
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			path := pathKey("")
			for i, part := range parts {
				path = path.child(part)
				if i == len(parts)-1 && e.Kind == unstable.ArrayTable {
					arrayTables[path]++
				}
				if n, ok := arrayTables[path]; ok {
					path = path.index(n - 1)
				}
			}
			l, c := line(first)
			if e.Kind == unstable.Table {
				if prev, dup := tables[path]; dup {
					msg := fmt.Sprintf("table [%s] is defined twice (also at line %d): merge the two tables into one", path, prev)
					if len(parts) == 2 && parts[0] == "profiles" {
						msg = fmt.Sprintf("profile %q is defined twice (also at line %d): merge the two [%s] tables into one", parts[1], prev, path)
					}
					return &Error{Line: l, Column: c, Key: path.String(), Msg: msg}
				}
				tables[path] = l
			}
			table = path
		case unstable.KeyValue:
			path := table
			for _, part := range parts {
				path = path.child(part)
			}
			l, c := line(first)
			if prev, dup := keys[path]; dup {
				return &Error{Line: l, Column: c, Key: path.String(), Msg: fmt.Sprintf("%s is set twice (also at line %d): each key may appear once in a table; remove one", path, prev)}
			}
			keys[path] = l
		}
	}
	return nil
}
