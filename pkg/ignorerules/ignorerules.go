// Package ignorerules decides which Agent Workspace paths are Git-ignored
// for Ignored Workspace State (spec §3.4, SR-13).
//
// The decision is fixed per generation: Load reads the host's effective
// ignore rules (every .gitignore outside ignored directories and .git,
// .git/info/exclude, core.excludesFile) and the index's tracked paths once,
// compiles every pattern to a regular expression, and the resulting Rules
// never change. Sandbox edits to .gitignore or the index during the
// generation therefore cannot re-route a path, so host content that was
// ignored at generation start stays unreachable.
//
// A path is ignored when it is not tracked, is not an ancestor directory of
// a tracked path, and either an ignore pattern excludes it or one of its
// ancestor directories is excluded (Git cannot re-include a path below an
// excluded directory). Precedence follows gitignore(5): within one source
// the last matching pattern wins; a deeper .gitignore beats a shallower
// one, which beats info/exclude, which beats core.excludesFile.
package ignorerules

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// pattern is one compiled gitignore line.
type pattern struct {
	re      *regexp.Regexp
	negate  bool
	dirOnly bool
	// base is the workspace-relative directory of the .gitignore ("" for
	// the top level and for info/exclude and core.excludesFile).
	base string
	// basename patterns (no slash) match the last component only.
	basename bool
	// literal is the pattern's text when it has no wildcard or escape
	// (leading slash removed), else "".
	literal string
}

// source is one file of patterns in precedence order.
type source struct {
	base     string
	patterns []pattern
	// personal: the developer's core.excludesFile, not the repository's
	// own rules (TopDirPatterns leaves it out).
	personal bool
}

// Rules is an immutable snapshot of the ignore rules and the tracked paths.
type Rules struct {
	// perDir holds the .gitignore patterns keyed by directory ("" = top).
	perDir map[string]*source
	// global holds info/exclude then core.excludesFile, highest first.
	global []*source
	// tracked holds every tracked path; trackedDirs every ancestor
	// directory of a tracked path.
	tracked, trackedDirs map[string]bool
	// gitlinks are the index's submodule entries (mode 160000), in order.
	gitlinks []string
	// patterns counts the patterns of every source (maxPatterns).
	patterns int
}

// maxPatterns bounds the patterns of all sources together. Each is a
// compiled regular expression (about 1.2 KiB), and the sandbox can write
// every .gitignore: without a bound, a few files of short lines would
// make the coordinator and the Git-routing daemon, on the host, compile
// gigabytes of them at the next start. Real repositories hold a few
// thousand at most.
const maxPatterns = 100_000

// Gitlinks returns the paths of the index's submodules (gitlink entries).
func (r *Rules) Gitlinks() []string { return r.gitlinks }

// NewRules builds Rules from already-read sources (tests and Load).
func NewRules() *Rules {
	return &Rules{perDir: map[string]*source{}, tracked: map[string]bool{}, trackedDirs: map[string]bool{}}
}

// AddGitignore adds the patterns of the .gitignore in directory dir
// (workspace-relative, "" for the top level).
func (r *Rules) AddGitignore(dir string, content []byte) error {
	s, err := r.parse(dir, content)
	if err != nil {
		return err
	}
	r.perDir[dir] = s
	return nil
}

// AddGlobal adds a whole-repository source (info/exclude first, then
// core.excludesFile: earlier calls take precedence).
func (r *Rules) AddGlobal(content []byte) error {
	return r.addGlobal(content, false)
}

// AddExcludesFile adds the developer's core.excludesFile, after
// info/exclude: it ignores like AddGlobal's sources, but its patterns are
// the developer's, not the repository's, so TopDirPatterns leaves them out.
func (r *Rules) AddExcludesFile(content []byte) error {
	return r.addGlobal(content, true)
}

func (r *Rules) addGlobal(content []byte, personal bool) error {
	s, err := r.parse("", content)
	if err != nil {
		return err
	}
	s.personal = personal
	r.global = append(r.global, s)
	return nil
}

// AddTracked records a tracked path (slash-separated, workspace-relative).
func (r *Rules) AddTracked(p string) {
	r.tracked[p] = true
	for d := parentOf(p); d != ""; d = parentOf(d) {
		if r.trackedDirs[d] {
			break
		}
		r.trackedDirs[d] = true
	}
}

// Tracked reports whether p is tracked or an ancestor of a tracked path.
func (r *Rules) Tracked(p string) bool { return r.tracked[p] || r.trackedDirs[p] }

// Empty reports whether the snapshot has no pattern at all (then nothing is
// ignored and the router is a pure passthrough).
func (r *Rules) Empty() bool {
	if len(r.perDir) > 0 {
		for _, s := range r.perDir {
			if len(s.patterns) > 0 {
				return false
			}
		}
	}
	for _, s := range r.global {
		if len(s.patterns) > 0 {
			return false
		}
	}
	return true
}

// TopDirPatterns returns, sorted and without duplicates, the names of the
// directory patterns of the repository's own top-level rules (the
// top-level .gitignore and info/exclude, not the developer's
// core.excludesFile, which would name directories in every repository)
// that name one top-level directory literally ("node_modules/", "/.venv/",
// "target/"): no wildcard, no negation, one path component. Whether such a
// name is ignored still depends on every rule and on the index (Ignored).
func (r *Rules) TopDirPatterns() []string {
	seen := map[string]bool{}
	var out []string
	add := func(s *source) {
		if s == nil || s.personal {
			return
		}
		for _, pt := range s.patterns {
			if pt.negate || !pt.dirOnly || pt.literal == "" || strings.Contains(pt.literal, "/") || pt.literal == "." || pt.literal == ".." || seen[pt.literal] {
				continue
			}
			seen[pt.literal] = true
			out = append(out, pt.literal)
		}
	}
	add(r.perDir[""])
	for _, s := range r.global {
		add(s)
	}
	sort.Strings(out)
	return out
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// Ignored reports whether the workspace-relative path p (slash-separated,
// no leading slash, never ".git" or below) is ignored; isDir tells whether
// p is (or is being created as) a directory.
func (r *Rules) Ignored(p string, isDir bool) bool {
	if p == "" || r.Tracked(p) {
		return false
	}
	// An excluded ancestor excludes everything below it.
	comps := strings.Split(p, "/")
	for i := 1; i < len(comps); i++ {
		if r.excluded(strings.Join(comps[:i], "/"), true) {
			return true
		}
	}
	return r.excluded(p, isDir)
}

// excluded applies the patterns to p itself (ancestors and tracking not
// considered: an excluded directory holding tracked files still excludes
// its untracked contents, as in Git).
func (r *Rules) excluded(p string, isDir bool) bool {
	// Deepest .gitignore first.
	for d := parentOf(p); ; d = parentOf(d) {
		if s := r.perDir[d]; s != nil {
			if m, neg := s.match(p, isDir); m {
				return !neg
			}
		}
		if d == "" {
			break
		}
	}
	for _, s := range r.global {
		if m, neg := s.match(p, isDir); m {
			return !neg
		}
	}
	return false
}

// match returns whether a pattern of s matches p and whether the deciding
// (last matching) pattern is a negation.
func (s *source) match(p string, isDir bool) (bool, bool) {
	rel := p
	if s.base != "" {
		if !strings.HasPrefix(p, s.base+"/") {
			return false, false
		}
		rel = p[len(s.base)+1:]
	}
	name := rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		name = rel[i+1:]
	}
	for i := len(s.patterns) - 1; i >= 0; i-- {
		pt := &s.patterns[i]
		if pt.dirOnly && !isDir {
			continue
		}
		subject := rel
		if pt.basename {
			subject = name
		}
		if pt.re.MatchString(subject) {
			return true, pt.negate
		}
	}
	return false, false
}

// parse compiles the patterns of one source into r's budget.
func (r *Rules) parse(base string, content []byte) (*source, error) {
	s := &source{base: base}
	sc := bufio.NewScanner(bytes.NewReader(content))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		pt, ok, err := compile(line)
		if err != nil {
			return nil, fmt.Errorf("ignore pattern %q (line %d of %s/.gitignore): %w", line, n, base, err)
		}
		if !ok {
			continue
		}
		if r.patterns++; r.patterns > maxPatterns {
			return nil, fmt.Errorf("the ignore rules hold more than %d patterns (at line %d of %s/.gitignore): Lazaret loads no more; trim or merge the .gitignore files on the host", maxPatterns, n, base)
		}
		pt.base = base
		s.patterns = append(s.patterns, pt)
	}
	return s, sc.Err()
}

// compile turns one gitignore line into a pattern; ok is false for blank
// lines and comments.
func compile(line string) (pattern, bool, error) {
	if line == "" || line[0] == '#' {
		return pattern{}, false, nil
	}
	// Trailing unescaped spaces are ignored.
	for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, "\\ ") {
		line = line[:len(line)-1]
	}
	var pt pattern
	if line[0] == '!' {
		pt.negate = true
		line = line[1:]
	} else if strings.HasPrefix(line, "\\!") || strings.HasPrefix(line, "\\#") {
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") && !strings.HasSuffix(line, "\\/") {
		pt.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return pattern{}, false, nil
	}
	if !strings.Contains(line, "/") {
		pt.basename = true
	} else {
		line = strings.TrimPrefix(line, "/")
	}
	re, err := globToRegexp(line)
	if err != nil {
		return pattern{}, false, err
	}
	pt.re = re
	if !strings.ContainsAny(line, "*?[\\") {
		pt.literal = line
	}
	return pt, true, nil
}

// globToRegexp compiles a wildmatch pattern (with gitignore's "**") into an
// anchored regular expression over slash-separated paths.
func globToRegexp(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); {
		switch {
		case strings.HasPrefix(g[i:], "**/") && (i == 0 || g[i-1] == '/'):
			b.WriteString("(?:.*/)?")
			i += 3
		case strings.HasPrefix(g[i:], "**") && i+2 == len(g) && (i == 0 || g[i-1] == '/'):
			b.WriteString(".*")
			i += 2
		case g[i] == '*':
			b.WriteString("[^/]*")
			i++
		case g[i] == '?':
			b.WriteString("[^/]")
			i++
		case g[i] == '\\' && i+1 < len(g):
			b.WriteString(regexp.QuoteMeta(g[i+1 : i+2]))
			i += 2
		case g[i] == '[':
			j := i + 1
			if j < len(g) && (g[j] == '!' || g[j] == '^') {
				j++
			}
			if j < len(g) && g[j] == ']' {
				j++
			}
			for j < len(g) && g[j] != ']' {
				j++
			}
			if j >= len(g) {
				b.WriteString(regexp.QuoteMeta("["))
				i++
				continue
			}
			class := g[i+1 : j]
			neg := false
			if class != "" && (class[0] == '!' || class[0] == '^') {
				neg, class = true, class[1:]
			}
			b.WriteString("[")
			if neg {
				b.WriteString("^/")
			}
			for _, c := range class {
				if c == '\\' || c == ']' || c == '[' || c == '^' {
					b.WriteByte('\\')
				}
				b.WriteRune(c)
			}
			b.WriteString("]")
			i = j + 1
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
			i++
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
