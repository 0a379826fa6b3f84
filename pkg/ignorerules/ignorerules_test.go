package ignorerules

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestIgnoredPrecedenceAndTracked(t *testing.T) {
	r := NewRules()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.AddGitignore("", []byte("node_modules/\n*.log\n!keep.log\n/dist\nbuild/\n.env\n# comment\ndocs/**/gen\n")))
	must(r.AddGitignore("sub", []byte("!*.log\nlocal\n")))
	must(r.AddGlobal([]byte(".DS_Store\n")))
	r.AddTracked("vendor.log")
	r.AddTracked("tracked/build/a.go")
	cases := []struct {
		p    string
		dir  bool
		want bool
	}{
		{"node_modules", true, true},
		{"node_modules", false, false}, // dir-only pattern
		{"a/node_modules/x/y.js", false, true},
		{"x.log", false, true},
		{"keep.log", false, false},
		{"sub/x.log", false, false},
		{"sub/local", false, true},
		{"local", false, false},
		{"dist", true, true},
		{"a/dist", true, false},
		{"dist/x", false, true},
		{"build/out.o", false, true},
		{"vendor.log", false, false},   // tracked stays live
		{"tracked/build", true, false}, // ancestor of a tracked path
		{"tracked/build/a.go", false, false},
		{"tracked/build/b.o", false, true}, // untracked below an excluded dir
		{".env", false, true},
		{"x/.DS_Store", false, true},
		{"docs/gen", true, true},
		{"docs/a/b/gen", true, true},
		{"src/main.go", false, false},
	}
	for _, c := range cases {
		if got := r.Ignored(c.p, c.dir); got != c.want {
			t.Errorf("Ignored(%q, dir=%v) = %v, want %v", c.p, c.dir, got, c.want)
		}
	}
}

// TestAgreesWithGit loads a real repository and compares every decision
// with `git check-ignore`.
func TestAgreesWithGit(t *testing.T) {
	ws := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = ws
		c.Env = []string{"HOME=" + ws, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
		out, _ := c.CombinedOutput()
		return string(out)
	}
	git("init", "-q")
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".gitignore", "*.o\n/out/\n!keep.o\nlogs/*\n!logs/important\n[Tt]emp*\n")
	write("a/.gitignore", "secret\n!x.o\n")
	write(".git/info/exclude", "scratch\n")
	write("forced.o", "tracked\n")
	git("add", "-f", "forced.o")
	paths := []string{"x.o", "keep.o", "forced.o", "out/f", "a/out/f", "a/secret", "a/x.o", "a/y.o", "logs/a", "logs/important", "Temp1", "temp2", "scratch", "b/scratch", "src/ok.go"}
	for _, p := range paths {
		write(p, "x")
	}
	r, err := Load(ws, "")
	if err != nil {
		t.Fatal(err)
	}
	// The same in two steps (the Git-routing daemon's: the index and the
	// global files, then the .gitignore files behind its mount).
	tracked, err := LoadTracked(ws, "")
	if err != nil {
		t.Fatal(err)
	}
	if !tracked.Ignored("scratch", false) || tracked.Ignored("x.o", false) {
		t.Errorf("LoadTracked: info/exclude's scratch ignored %v (want true), .gitignore's x.o ignored %v (want false: not walked yet)",
			tracked.Ignored("scratch", false), tracked.Ignored("x.o", false))
	}
	if err := tracked.LoadGitignores(ws); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		c := exec.Command("git", "check-ignore", "-q", p)
		c.Dir = ws
		c.Env = []string{"HOME=" + ws, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
		gitSays := c.Run() == nil
		if got := r.Ignored(p, false); got != gitSays {
			t.Errorf("%s: ignorerules %v, git check-ignore %v", p, got, gitSays)
		}
		if got := tracked.Ignored(p, false); got != gitSays {
			t.Errorf("%s: LoadTracked then LoadGitignores %v, git check-ignore %v", p, got, gitSays)
		}
	}
}

func TestParseIndexVersions(t *testing.T) {
	for _, v := range []string{"2", "3", "4"} {
		ws := t.TempDir()
		run := func(args ...string) {
			c := exec.Command("git", args...)
			c.Dir = ws
			c.Env = []string{"HOME=" + ws, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v %s", args, err, out)
			}
		}
		run("init", "-q")
		for _, p := range []string{"a.txt", "dir/b.txt", "dir/sub/c.txt", "dir/sub/d.txt"} {
			os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o755)
			os.WriteFile(filepath.Join(ws, p), []byte(p), 0o644)
		}
		run("add", ".")
		run("update-index", "--index-version", v)
		b, err := os.ReadFile(filepath.Join(ws, ".git", "index"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseIndex(b)
		if err != nil {
			t.Fatalf("v%s: %v", v, err)
		}
		if want := "a.txt dir/b.txt dir/sub/c.txt dir/sub/d.txt"; joinS(got) != want {
			t.Errorf("v%s: %q, want %q", v, joinS(got), want)
		}
	}
}

// TestParseIndexBoundsCraftedIndex: the sandbox writes the index, and a
// crafted one must not make the parser allocate for what it only claims
// (an entry count of 2^32-1) or expand version 4's prefix compression to
// paths of quadratic total length (each entry keeping the whole previous
// path and adding one byte): both are refused, with the fix.
func TestParseIndexBoundsCraftedIndex(t *testing.T) {
	header := func(ver, n uint32) []byte {
		b := []byte("DIRC")
		b = binary.BigEndian.AppendUint32(b, ver)
		return binary.BigEndian.AppendUint32(b, n)
	}
	if _, err := ParseIndex(append(header(2, 0xffffffff), make([]byte, 128)...)); err == nil || !strings.Contains(err.Error(), "claims 4294967295 entries") {
		t.Errorf("an entry count the file cannot hold: %v", err)
	}
	// Version 4: strip 0, one new byte per entry. 2^18 entries of 65 bytes
	// (17 MiB) would expand to 32 GiB of paths.
	const n = 1 << 18
	b := header(4, n)
	entry := make([]byte, 62, 65)
	binary.BigEndian.PutUint32(entry[24:28], 0o100644)
	for i := 0; i < n; i++ {
		b = append(b, entry...)
		b = append(b, 0, 'a', 0) // strip varint 0, suffix "a", NUL
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ParseIndex(b)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "not an index Git wrote") || !strings.Contains(err.Error(), "git reset") {
		t.Errorf("quadratic version 4 paths: %v", err)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<30 {
		t.Errorf("parsing allocated %d MiB before refusing", grown>>20)
	}
}

// TestPatternsBounded: the sandbox writes every .gitignore; the patterns
// of all of them together are bounded (each is a compiled expression on
// the host), and Load refuses more at once, naming the file.
func TestPatternsBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i < maxPatterns*6/10; i++ {
		fmt.Fprintf(&b, "gen-%d.out\n", i)
	}
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, ".gitignore"), []byte(b.String()), 0o644)
	if _, err := Load(ws, ""); err != nil {
		t.Fatalf("60%% of the bound: %v", err)
	}
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", ".gitignore"), []byte(b.String()), 0o644)
	_, err := Load(ws, "")
	if err == nil || !strings.Contains(err.Error(), "more than 100000 patterns") || !strings.Contains(err.Error(), "sub/.gitignore") {
		t.Errorf("120%% of the bound: %v", err)
	}
}

func joinS(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

func TestExcludesFile(t *testing.T) {
	home := t.TempDir()
	gitdir := filepath.Join(home, "repo", ".git")
	os.MkdirAll(gitdir, 0o755)
	if got := ExcludesFile(gitdir, home, ""); got != filepath.Join(home, ".config", "git", "ignore") {
		t.Errorf("default: %q", got)
	}
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = x\n[core]\n\texcludesFile = ~/.gitignore_global\n"), 0o644)
	if got := ExcludesFile(gitdir, home, ""); got != filepath.Join(home, ".gitignore_global") {
		t.Errorf("global: %q", got)
	}
}

func TestTopDirPatterns(t *testing.T) {
	r := NewRules()
	if err := r.AddGitignore("", []byte("node_modules/\n/.venv/\ntarget/\n*.log\n!keep/\nbuild-*/\nsrc/gen/\ndist\n/out/\nnode_modules/\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.AddGitignore("sub", []byte("deep/\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.AddGlobal([]byte("\\[x]/\n.cache/\n")); err != nil {
		t.Fatal(err)
	}
	// The developer's own excludes file ignores, but names no directory
	// of this repository.
	if err := r.AddExcludesFile([]byte(".idea/\n")); err != nil {
		t.Fatal(err)
	}
	if !r.Ignored(".idea", true) {
		t.Error(".idea/ of core.excludesFile does not ignore")
	}
	got := strings.Join(r.TopDirPatterns(), ",")
	if want := ".cache,.venv,node_modules,out,target"; got != want {
		t.Fatalf("TopDirPatterns = %s, want %s", got, want)
	}
}
