package domain

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestDeriveIDStableAndDistinct(t *testing.T) {
	a := DeriveID("default", "/home/dev/proj")
	if a != DeriveID("default", "/home/dev/proj") || !a.Valid() {
		t.Fatalf("unstable or invalid id %q", a)
	}
	for _, other := range []ID{DeriveID("claude", "/home/dev/proj"), DeriveID("default", "/home/dev/proj2"), DeriveID("default/home", "/dev/proj")} {
		if other == a {
			t.Fatalf("collision for distinct Domains: %q", other)
		}
	}
}

func TestResolveWorkspace(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	sub := filepath.Join(repo, "a", "b")
	os.MkdirAll(sub, 0o755)
	os.Mkdir(filepath.Join(repo, ".git"), 0o755)
	link := filepath.Join(root, "link")
	os.Symlink(sub, link)
	canonRepo, _ := filepath.EvalSymlinks(repo)

	ws, err := ResolveWorkspace(link, "")
	if err != nil {
		t.Fatal(err)
	}
	if ws.Root != canonRepo || ws.Subdir != "a/b" || !ws.Git {
		t.Fatalf("got %+v", ws)
	}
	plain := filepath.Join(root, "plain", "x")
	os.MkdirAll(plain, 0o755)
	ws, err = ResolveWorkspace(plain, "")
	if err != nil || ws.Git || ws.Subdir != "" || !strings.HasSuffix(ws.Root, "/plain/x") {
		t.Fatalf("non-repository: %+v %v", ws, err)
	}
	// A gitfile (worktree or submodule) also marks the top level.
	wt := filepath.Join(root, "wt")
	os.Mkdir(wt, 0o755)
	os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: /elsewhere\n"), 0o644)
	if ws, _ := ResolveWorkspace(wt, ""); !ws.Git {
		t.Errorf("gitfile not recognised")
	}
	f := filepath.Join(root, "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := ResolveWorkspace(f, ""); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file: %v", err)
	}
	if _, err := ResolveWorkspace(filepath.Join(root, "missing"), ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("missing: %v", err)
	}
	if _, err := ResolveWorkspace(plain, plain); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("home accepted: %v", err)
	}
}

func TestRootsAndPaths(t *testing.T) {
	env := map[string]string{"HOME": "/home/dev", "XDG_RUNTIME_DIR": "/run/user/1001"}
	r, err := DefaultRoots(func(k string) string { return env[k] }, 1001)
	if err != nil || r.Storage != "/home/dev/.local/state/lazaret" || r.Runtime != "/run/user/1001/lazaret" {
		t.Fatalf("%+v %v", r, err)
	}
	delete(env, "XDG_RUNTIME_DIR")
	env["XDG_STATE_HOME"] = "/s"
	r, _ = DefaultRoots(func(k string) string { return env[k] }, 1001)
	if r.Storage != "/s/lazaret" || r.Runtime != "/s/lazaret/run" {
		t.Fatalf("fallbacks %+v", r)
	}
	env["XDG_STATE_HOME"] = "relative"
	if _, err := DefaultRoots(func(k string) string { return env[k] }, 1001); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("relative XDG_STATE_HOME: %v", err)
	}
	id := DeriveID("default", "/p")
	p, err := PathsFor(Roots{Storage: "/s", Runtime: "/run/user/1001/lazaret"}, id)
	if err != nil || p.ControlSocket() != "/run/user/1001/lazaret/"+string(id)+"/control.sock" || p.DomainRoot != "/s/domains/"+string(id) {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := PathsFor(Roots{Storage: "/s", Runtime: "/" + strings.Repeat("x", 80)}, id); !errors.Is(err, errdefs.ErrUnsupportedHost) || !strings.Contains(err.Error(), "XDG_RUNTIME_DIR") {
		t.Errorf("long socket path: %v", err)
	}
	if _, err := PathsFor(Roots{}, "../../etc"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad id accepted: %v", err)
	}
}

func TestPrivateDirs(t *testing.T) {
	d := filepath.Join(t.TempDir(), "a", "b")
	if err := EnsurePrivateDir(d, os.Getuid()); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	if err := VerifyPrivateDir(d, os.Getuid()); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("open mode accepted: %v", err)
	}
	os.Chmod(d, 0o700)
	if err := VerifyPrivateDir(d, os.Getuid()+1); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("foreign owner accepted: %v", err)
	}
	l := d + "-link"
	os.Symlink(d, l)
	if err := VerifyPrivateDir(l, os.Getuid()); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("symlink accepted: %v", err)
	}
}

func TestStoredIdentity(t *testing.T) {
	root := t.TempDir()
	id := DeriveID("default", "/p")
	p, _ := PathsFor(Roots{Storage: root, Runtime: "/r"}, id)
	os.MkdirAll(p.DomainRoot, 0o700)
	if err := VerifyOrRecordIdentity(p, "default", "/p"); err != nil {
		t.Fatal(err)
	}
	if err := VerifyOrRecordIdentity(p, "default", "/p"); err != nil {
		t.Fatalf("reuse: %v", err)
	}
	if err := VerifyOrRecordIdentity(p, "default", "/other"); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("mismatch accepted: %v", err)
	}
	file := filepath.Join(p.DomainRoot, "domain.json")
	os.WriteFile(file, []byte(`{"version": 9}`), 0o600)
	if err := VerifyOrRecordIdentity(p, "default", "/p"); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("newer version accepted: %v", err)
	}
	os.WriteFile(file, []byte(`{`), 0o600)
	if err := VerifyOrRecordIdentity(p, "default", "/p"); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Errorf("corrupt accepted: %v", err)
	}
}

func TestSanitizeHostname(t *testing.T) {
	for in, want := range map[string]string{"My Project!": "lazaret-my-project", "": "lazaret-workspace", "___": "lazaret-workspace"} {
		if got := SanitizeHostname(in); got != want {
			t.Errorf("%q: %q want %q", in, got, want)
		}
	}
	if got := SanitizeHostname(strings.Repeat("a", 100)); len(got) > 63 {
		t.Errorf("too long: %q", got)
	}
}

func TestFormsWithoutRegexp(t *testing.T) {
	profile := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	for _, in := range []string{"", "a", "-a", ".a", "_a", "a-", "a.b_c-d", "A", "a b", "0", strings.Repeat("a", 63), strings.Repeat("a", 64), "é"} {
		if got, want := ValidProfileName(in), profile.MatchString(in); got != want {
			t.Errorf("profile %q: %v, regexp says %v", in, got, want)
		}
	}
	for _, in := range []string{"", "0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdeF", "0123456789abcdef0123456789abcde"} {
		if got, want := ID(in).Valid(), regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(in); got != want {
			t.Errorf("id %q: %v, regexp says %v", in, got, want)
		}
	}
}
