// Package gitconfigguard finds what host Git executes or reads as
// configuration inside the Agent Workspace (spec §3.4 Git Sentry, SR-4),
// so that the sandbox cannot change it: the Git-routing daemon (package
// gitroute) keeps every path it returns read-only for the generation.
//
// The input is the host's own reading of its configuration: at each
// generation start (and again while it runs, whenever a path of
// Result.Watch changed) the Host Coordinator runs the developer's `git config
// --show-origin --show-scope -z --list` in the workspace (system, global,
// repository and worktree files with their includes, exactly as host Git
// resolves them) through its process broker, and Parse reads the output.
// An include whose condition did not match (or that Git did not read) is
// read too, with `git config --file F --includes`, so a file any host
// repository may include is covered whatever the condition; at most
// maxIncludeDepth levels, as Git itself. The repositories host Git also
// runs in below the workspace's Git directory — each submodule
// (.git/modules/…, recursively) and linked worktree (.git/worktrees/W) —
// are read the same way (`git --git-dir=D config …`), their relative
// paths taken from their own working trees.
//
// Guarded, for each entry (Paths):
//
//   - every configuration file Git read (the entry's origin);
//   - include.path and includeIf.<condition>.path: the named file
//     (relative to the including file; `~/` is the home directory);
//   - core.hooksPath: the directory and everything beneath it (relative to
//     the worktree's top level); if it is the workspace itself or its .git,
//     the hook files named in githooks(5) in it; if it is named `_` (husky
//     9 and later, whose hook stubs run ../<hook>), its parent as well;
//   - the programs of command-valued keys: the first word of every simple
//     command (and an interpreter's script, or the command of `sh -c`) of
//     core.fsmonitor (unless boolean), core.sshCommand, core.editor,
//     core.pager, core.gitProxy, core.alternateRefsCommand,
//     sequence.editor, pager.<cmd> (unless boolean),
//     interactive.diffFilter, gpg.ssh.defaultKeyCommand,
//     filter.<driver>.clean/smudge/process, diff.external,
//     diff.<driver>.textconv/command, merge.<driver>.driver,
//     difftool.<tool>.cmd, mergetool.<tool>.cmd, hook.<name>.command,
//     trailer.<token>.command/cmd, remote.<name>.uploadpack/receivepack,
//     uploadpack.packObjectsHook, sendemail[.<id>].toCmd/ccCmd/headerCmd/
//     sendmailCmd, man.<tool>.cmd, browser.<tool>.cmd, guitool.<name>.cmd,
//     instaweb.httpd, imap.tunnel, credential[.<url>].helper (a `!`
//     command, an absolute path, or `git credential-<name>`: nothing in
//     the workspace), alias.<name> and submodule.<name>.update when they
//     start with `!`;
//   - the whole value of program-valued keys: gpg.program,
//     gpg.<format>.program, core.askPass, difftool/mergetool/man/
//     browser.<tool>.path, sendemail[.<id>].smtpServer.
//
// A program word names a workspace file only when it contains a slash
// (Git and the shell look a bare name up in PATH); a relative one is taken
// from the worktree's top level, where host Git runs them. A guarded path
// reached through a symlink is guarded at both the name and its target
// (when that lies in the workspace). Paths outside the workspace are not
// the sandbox's to change and are left out; so is the workspace itself.
package gitconfigguard

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitsentry"
)

// ListArgs are the arguments of the host Git run whose output Compute
// reads first: the effective configuration of the directory Git runs in.
var ListArgs = []string{"config", "--show-origin", "--show-scope", "-z", "--list"}

// FileArgs are the arguments reading one configuration file with its
// includes (an include Git did not follow for the workspace).
func FileArgs(file string) []string {
	return []string{"config", "--file", file, "--includes", "--show-origin", "--show-scope", "-z", "--list"}
}

// RepoArgs are the arguments reading the effective configuration of the
// repository whose Git directory is gitdir (a submodule's or a linked
// worktree's).
func RepoArgs(gitdir string) []string {
	return append([]string{"--git-dir=" + gitdir}, ListArgs...)
}

// maxIncludeDepth is Git's own limit of nested includes.
const maxIncludeDepth = 10

// maxFiles bounds the configuration files read beyond the effective list.
const maxFiles = 64

// Entry is one configuration entry as host Git reported it.
type Entry struct {
	// Scope is system, global, local, worktree or command.
	Scope string
	// Origin is "file:PATH" (PATH as Git printed it: relative to the
	// directory Git ran in, or absolute), "command line:", "blob:…", ….
	Origin string
	// Key is section[.subsection].variable, section and variable in
	// lower case as Git prints them.
	Key string
	// Value is the value; NoValue a key without `=` (boolean true).
	Value   string
	NoValue bool
}

// Parse reads the output of `git config --show-origin --show-scope -z
// --list`: per entry scope NUL origin NUL key [LF value] NUL.
func Parse(out []byte) ([]Entry, error) {
	if len(out) == 0 {
		return nil, nil
	}
	if out[len(out)-1] != 0 {
		return nil, errdefs.New(errdefs.ErrCorrupt, "unexpected output of git config --list: not NUL-terminated")
	}
	f := bytes.Split(out[:len(out)-1], []byte{0})
	if len(f)%3 != 0 {
		return nil, errdefs.New(errdefs.ErrCorrupt, "unexpected output of git config --show-scope --show-origin -z --list: %d fields, not scope, origin and entry triples", len(f))
	}
	ents := make([]Entry, 0, len(f)/3)
	for i := 0; i < len(f); i += 3 {
		e := Entry{Scope: string(f[i]), Origin: string(f[i+1])}
		k, v, ok := strings.Cut(string(f[i+2]), "\n")
		e.Key, e.Value, e.NoValue = k, v, !ok
		if e.Key == "" {
			return nil, errdefs.New(errdefs.ErrCorrupt, "unexpected output of git config --list: an entry without a key (origin %q)", e.Origin)
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// Path is one guarded workspace path.
type Path struct {
	// Rel is workspace-relative, slash-separated and clean.
	Rel string
	// Tree guards everything beneath Rel too (a hooks directory).
	Tree bool
	// Reason names the key and origin that made it guarded (for the log).
	Reason string
}

// Input describes where host Git runs.
type Input struct {
	// Workspace is the canonical absolute host path of the workspace.
	Workspace string
	// TopLevel is the worktree top level host Git runs hooks and commands
	// in (TopLevel(Workspace)).
	TopLevel string
	// Home expands `~/`.
	Home string
	// Dir is the directory the effective list was read in (its relative
	// origins are relative to it).
	Dir string
}

// Reader runs host Git with args (ListArgs or FileArgs) in Input.Dir and
// returns its standard output; a failing Git is an error.
type Reader func(args []string) ([]byte, error)

// Result is what Compute found.
type Result struct {
	// Effective is the workspace's effective configuration, in Git's order.
	Effective []Entry
	// Paths are the guarded paths, sorted, each once.
	Paths []Path
	// Files are the configuration files read, absolute, sorted.
	Files []string
	// Watch are the paths whose change (or appearance) can change this
	// result, absolute, sorted: every file read, every include target
	// (read or missing), each repository's config and config.worktree,
	// and the directories of submodule and worktree Git directories.
	// Package hc watches them while the Domain runs.
	Watch []string
}

// Compute reads the host configuration through read and returns the
// guarded paths of in.Workspace.
func Compute(in Input, read Reader) (Result, error) {
	var res Result
	out, err := read(ListArgs)
	if err != nil {
		return res, fmt.Errorf("read the host Git configuration of %s: %w", in.Dir, err)
	}
	if res.Effective, err = Parse(out); err != nil {
		return res, err
	}
	p := &planner{in: in, seen: map[includeFile]bool{}, files: map[string]bool{}, watch: map[string]bool{}, paths: map[string]Path{}}
	if err := p.follow(p.add(res.Effective, in.TopLevel), read); err != nil {
		return res, err
	}
	repos, err := gitDirs(in.Workspace)
	if err != nil {
		return res, err
	}
	for _, gd := range repos {
		out, err := read(RepoArgs(gd))
		if err != nil {
			return res, fmt.Errorf("read the host Git configuration of %s: %w", gd, err)
		}
		ents, err := Parse(out)
		if err != nil {
			return res, fmt.Errorf("%s: %w", gd, err)
		}
		if err := p.follow(p.add(ents, workTree(gd, ents, in.Workspace)), read); err != nil {
			return res, err
		}
	}
	for f := range p.files {
		res.Files = append(res.Files, f)
	}
	sort.Strings(res.Files)
	top := filepath.Join(in.Workspace, ".git")
	p.watch[top] = true // a repository made on the host (git init)
	for _, gd := range append([]string{top}, repos...) {
		p.watch[filepath.Join(gd, "config")] = true
		p.watch[filepath.Join(gd, "config.worktree")] = true
	}
	p.watch[filepath.Join(top, "modules")] = true
	p.watch[filepath.Join(top, "worktrees")] = true
	for f := range p.watch {
		res.Watch = append(res.Watch, f)
	}
	sort.Strings(res.Watch)
	for _, g := range p.paths {
		res.Paths = append(res.Paths, g)
	}
	sort.Slice(res.Paths, func(i, j int) bool { return res.Paths[i].Rel < res.Paths[j].Rel })
	return res, nil
}

// follow reads the include files Git did not read, level by level.
func (p *planner) follow(queue []includeFile, read Reader) error {
	for depth := 0; len(queue) > 0; depth++ {
		if depth >= maxIncludeDepth {
			var names []string
			for _, q := range queue {
				names = append(names, q.file)
			}
			return errdefs.New(errdefs.ErrRefused, "host Git configuration includes are nested deeper than %d levels (%s); Git refuses that too: fix the include.path/includeIf settings", maxIncludeDepth, strings.Join(names, ", "))
		}
		var next []includeFile
		for _, q := range queue {
			if p.seen[q] {
				continue
			}
			p.seen[q] = true
			if st, err := os.Stat(q.file); err != nil || !st.Mode().IsRegular() {
				continue // Git skips a missing include; the path is guarded
			}
			if p.reads++; p.reads > maxFiles {
				return errdefs.New(errdefs.ErrRefused, "the host Git configuration includes more than %d files; Lazaret reads each to protect what it names: reduce the includes", maxFiles)
			}
			out, err := read(FileArgs(q.file))
			if err != nil {
				return fmt.Errorf("read the included Git configuration file %s: %w", q.file, err)
			}
			ents, err := Parse(out)
			if err != nil {
				return fmt.Errorf("%s: %w", q.file, err)
			}
			next = append(next, p.add(ents, q.top)...)
		}
		queue = next
	}
	return nil
}

// gitDirs returns the Git directories below the workspace's own (a
// directory .git): submodules' (.git/modules/…, recursively) and linked
// worktrees' (.git/worktrees/W).
func gitDirs(ws string) ([]string, error) {
	top := filepath.Join(ws, ".git")
	if st, err := os.Lstat(top); err != nil || !st.IsDir() {
		return nil, nil
	}
	var out []string
	var modules func(gitdir string) error
	modules = func(gitdir string) error {
		return gitsentry.WalkModules(filepath.Join(gitdir, "modules"), func(sub string) error {
			out = append(out, sub)
			return modules(sub)
		})
	}
	if err := modules(top); err != nil {
		return nil, fmt.Errorf("list the submodules of %s: %w", top, err)
	}
	ents, err := os.ReadDir(filepath.Join(top, "worktrees"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list the linked worktrees of %s: %w", top, err)
	}
	for _, e := range ents {
		d := filepath.Join(top, "worktrees", e.Name())
		if _, err := os.Lstat(filepath.Join(d, "HEAD")); e.IsDir() && err == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// workTree is where host Git runs hooks and commands for the repository
// of gitdir: a linked worktree's directory (its gitdir file names
// <worktree>/.git), a submodule's core.worktree (relative to gitdir), or
// else the submodule's path in the workspace, which Git names its gitdir
// after.
func workTree(gitdir string, ents []Entry, ws string) string {
	if b, err := os.ReadFile(filepath.Join(gitdir, "gitdir")); err == nil {
		if g := strings.TrimSpace(string(b)); filepath.IsAbs(g) {
			return filepath.Dir(filepath.Clean(g))
		}
	}
	wt := ""
	for _, e := range ents {
		if e.Key == "core.worktree" && !e.NoValue && (e.Scope == "local" || e.Scope == "worktree") {
			wt = e.Value
		}
	}
	if wt == "" {
		if rel, err := filepath.Rel(filepath.Join(ws, ".git", "modules"), gitdir); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(ws, strings.ReplaceAll(rel, string(filepath.Separator)+"modules"+string(filepath.Separator), string(filepath.Separator)))
		}
		return ws
	}
	if !filepath.IsAbs(wt) {
		wt = filepath.Join(gitdir, wt)
	}
	return filepath.Clean(wt)
}

// TopLevel returns the worktree top level host Git uses in ws: ws if it
// has a .git, else the nearest ancestor with one (ws is inside a larger
// repository), else ws.
func TopLevel(ws string) string {
	for d := ws; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			return ws
		}
	}
}

type kind int

const (
	none kind = iota
	include
	hooksDir
	command
	commandUnlessBool
	bangCommand
	helper
	program
)

// rule matches section.sub.variable: sub "" is none, "*" any present,
// "?" present or not; variable "*" any.
type rule struct {
	section, sub, variable string
	kind                   kind
}

var rules = []rule{
	{"include", "", "path", include},
	{"includeif", "*", "path", include},
	{"core", "", "hookspath", hooksDir},
	{"core", "", "fsmonitor", commandUnlessBool},
	{"core", "", "sshcommand", command},
	{"core", "", "editor", command},
	{"core", "", "pager", command},
	{"core", "", "gitproxy", command},
	{"core", "", "alternaterefscommand", command},
	{"core", "", "askpass", program},
	{"sequence", "", "editor", command},
	{"pager", "", "*", commandUnlessBool},
	{"interactive", "", "difffilter", command},
	{"gpg", "", "program", program},
	{"gpg", "*", "program", program},
	{"gpg", "ssh", "defaultkeycommand", command},
	{"credential", "?", "helper", helper},
	{"filter", "*", "clean", command},
	{"filter", "*", "smudge", command},
	{"filter", "*", "process", command},
	{"diff", "", "external", command},
	{"diff", "*", "textconv", command},
	{"diff", "*", "command", command},
	{"merge", "*", "driver", command},
	{"difftool", "*", "cmd", command},
	{"difftool", "*", "path", program},
	{"mergetool", "*", "cmd", command},
	{"mergetool", "*", "path", program},
	{"hook", "*", "command", command},
	{"trailer", "*", "command", command},
	{"trailer", "*", "cmd", command},
	{"remote", "*", "uploadpack", command},
	{"remote", "*", "receivepack", command},
	{"uploadpack", "", "packobjectshook", command},
	{"sendemail", "?", "tocmd", command},
	{"sendemail", "?", "cccmd", command},
	{"sendemail", "?", "headercmd", command},
	{"sendemail", "?", "sendmailcmd", command},
	{"sendemail", "?", "smtpserver", program},
	{"man", "*", "cmd", command},
	{"man", "*", "path", program},
	{"browser", "*", "cmd", command},
	{"browser", "*", "path", program},
	{"guitool", "*", "cmd", command},
	{"instaweb", "", "httpd", command},
	{"imap", "", "tunnel", command},
	{"alias", "?", "*", bangCommand},
	{"submodule", "*", "update", bangCommand},
}

// splitKey splits section[.subsection].variable (the subsection may hold
// dots).
func splitKey(k string) (section, sub, variable string) {
	i, j := strings.IndexByte(k, '.'), strings.LastIndexByte(k, '.')
	if i < 0 {
		return strings.ToLower(k), "", ""
	}
	section, variable = strings.ToLower(k[:i]), strings.ToLower(k[j+1:])
	if i < j {
		sub = k[i+1 : j]
	}
	return section, sub, variable
}

func classify(key string) kind {
	section, sub, variable := splitKey(key)
	for _, r := range rules {
		if r.section != section || r.variable != "*" && r.variable != variable {
			continue
		}
		switch r.sub {
		case "":
			if sub != "" {
				continue
			}
		case "*":
			if sub == "" {
				continue
			}
		case "?":
		default:
			if !strings.EqualFold(r.sub, sub) {
				continue
			}
		}
		return r.kind
	}
	return none
}

// isBool reports whether v is one of Git's boolean spellings.
func isBool(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "yes", "on", "1", "false", "no", "off", "0", "":
		return true
	}
	return false
}

// hookNames are the hooks of githooks(5).
var hookNames = []string{
	"applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
	"prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
	"pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
	"reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
	"fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
	"post-index-change",
}

type planner struct {
	in Input
	// seen are the include files read or known to Git's own reading, per
	// working tree (relative programs in them depend on it); files are
	// all configuration files read.
	seen  map[includeFile]bool
	files map[string]bool
	watch map[string]bool // Result.Watch
	reads int
	paths map[string]Path
}

// includeFile is a configuration file read for the working tree top.
type includeFile struct{ file, top string }

// add plans the entries (relative programs and hooks directories are
// taken from the working tree top; relative origins from in.Dir) and
// returns the include files that have not been read.
func (p *planner) add(ents []Entry, top string) []includeFile {
	var queue []includeFile
	for _, e := range ents {
		origin := originFile(e.Origin, p.in.Dir)
		if origin != "" {
			p.seen[includeFile{origin, top}] = true
			p.files[origin] = true
			p.watch[origin] = true
			p.guardFile(origin, false, fmt.Sprintf("%s configuration file read by host Git", e.Scope))
		}
		why := fmt.Sprintf("%s (%s)", e.Key, e.Origin)
		switch classify(e.Key) {
		case include:
			if e.NoValue || e.Value == "" {
				continue
			}
			base := p.in.Dir
			if origin != "" {
				base = filepath.Dir(origin)
			}
			f := p.abs(e.Value, base)
			p.watch[f] = true
			p.guardFile(f, false, why)
			if !p.seen[includeFile{f, top}] {
				queue = append(queue, includeFile{f, top})
			}
		case hooksDir:
			if !e.NoValue && e.Value != "" {
				p.guardHooks(p.abs(e.Value, top), why)
			}
		case commandUnlessBool:
			if !e.NoValue && !isBool(e.Value) {
				p.guardCommand(e.Value, top, why)
			}
		case command:
			p.guardCommand(e.Value, top, why)
		case bangCommand:
			if v, ok := strings.CutPrefix(e.Value, "!"); ok {
				p.guardCommand(v, top, why)
			}
		case helper:
			p.guardCommand(strings.TrimPrefix(e.Value, "!"), top, why)
		case program:
			p.guardProgram(strings.TrimSpace(e.Value), top, why)
		}
	}
	return queue
}

// originFile returns the absolute path of a "file:" origin.
func originFile(origin, dir string) string {
	f, ok := strings.CutPrefix(origin, "file:")
	if !ok || f == "" {
		return ""
	}
	if !filepath.IsAbs(f) {
		f = filepath.Join(dir, f)
	}
	return filepath.Clean(f)
}

// abs expands `~/` and makes v absolute against base.
func (p *planner) abs(v, base string) string {
	v = p.expand(v)
	if !filepath.IsAbs(v) {
		v = filepath.Join(base, v)
	}
	return filepath.Clean(v)
}

// expand replaces a leading `~`, `$HOME` or `${HOME}` with the home
// directory.
func (p *planner) expand(v string) string {
	if p.in.Home == "" {
		return v
	}
	for _, pre := range []string{"~/", "$HOME/", "${HOME}/"} {
		if rest, ok := strings.CutPrefix(v, pre); ok {
			return filepath.Join(p.in.Home, rest)
		}
	}
	return v
}

func (p *planner) guardCommand(cmd, top, why string) {
	for _, w := range programs(cmd) {
		p.guardProgram(w, top, why)
	}
}

// guardProgram guards a program word that names a path (it holds a
// slash), relative ones from the working tree top.
func (p *planner) guardProgram(w, top, why string) {
	if !strings.Contains(w, "/") {
		return
	}
	p.guardFile(p.abs(w, top), false, why)
}

// guardHooks guards a hooks directory: the whole tree, unless it is the
// workspace, its .git or one of their ancestors — then only the hooks in
// it; husky's stub directory `_` with its parent, whose hooks the stubs
// run.
func (p *planner) guardHooks(dir, why string) {
	rel, ok := p.rel(dir)
	if !ok || rel == "." || rel == ".git" {
		for _, h := range hookNames {
			p.guardFile(filepath.Join(dir, h), false, why)
		}
		return
	}
	p.guardFile(dir, true, why)
	if filepath.Base(dir) == "_" {
		p.guardHooks(filepath.Dir(dir), why+", whose stubs run ../<hook>")
	}
}

// guardFile records abs (and, through symlinks, its target) when it lies
// in the workspace.
func (p *planner) guardFile(abs string, tree bool, why string) {
	p.record(abs, tree, why)
	if real := resolve(abs); real != abs {
		p.record(real, tree, why+" through a symlink")
	}
}

func (p *planner) record(abs string, tree bool, why string) {
	rel, ok := p.rel(abs)
	if !ok || rel == "." || tree && rel == ".git" {
		return
	}
	if old, ok := p.paths[rel]; ok {
		if old.Tree || !tree {
			return
		}
	}
	p.paths[rel] = Path{Rel: rel, Tree: tree, Reason: why}
}

// rel returns abs relative to the workspace, if it lies within it.
func (p *planner) rel(abs string) (string, bool) {
	r, err := filepath.Rel(p.in.Workspace, abs)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return "", false
	}
	return filepath.ToSlash(r), true
}

// resolve follows the symlinks of abs's existing part (the missing rest
// is appended as is).
func resolve(abs string) string {
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return abs
	}
	return filepath.Join(resolve(parent), filepath.Base(abs))
}
