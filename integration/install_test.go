package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestInstall installs the built binaries with the Makefile's own install
// recipe into a DESTDIR (PREFIX=/usr/local), then, as the test user and
// with nothing but the installed tree on PATH (no LAZARET_RUNSC: the pinned
// runsc is installed in libexec), checks `lazaret version` (all five
// binaries answer with one version), `lazaret doctor` (every check passes
// on this machine), a real sandboxed run, the bash completion, and a
// profile function from `lazaret alias` in bash. Then `make uninstall`
// with the same DESTDIR and PREFIX removes exactly what install put there:
// the tree is again what it was before the install (the shared directories
// and another package's files planted there stay; libexec/lazaret goes).
func TestInstall(t *testing.T) {
	e := need(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(e.base, "install-"+randHex(3))
	if err := os.MkdirAll(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	// What a system has before Lazaret: the shared directories install
	// writes into, with another package's files in some of them.
	for _, d := range []string{"usr/local/bin", "usr/local/libexec", "usr/local/share/man/man1", "usr/local/share/bash-completion/completions",
		"usr/local/share/zsh/site-functions", "usr/local/share/fish/vendor_completions.d"} {
		if err := os.MkdirAll(filepath.Join(dest, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"usr/local/bin/other-tool", "usr/local/share/man/man1/other-tool.1", "usr/local/share/bash-completion/completions/other-tool"} {
		if err := os.WriteFile(filepath.Join(dest, f), []byte("not Lazaret's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	beforeInstall := treeOf(t, dest)
	mk := exec.Command("make", "--no-print-directory", "-C", repo, "install-files", "DESTDIR="+dest, "PREFIX=/usr/local", "BIN="+e.bin, "RUNSC="+e.runsc)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install-files: %v\n%s", err, out)
	}
	prefix := filepath.Join(dest, "usr/local")
	for _, f := range []string{"bin/lazaret", "libexec/lazaret/lazaret-cli", "libexec/lazaret/lazaret-hc", "libexec/lazaret/lazaret-rs", "libexec/lazaret/lazaret-gitroute", "libexec/lazaret/lazaret-escalate", "libexec/lazaret/lazaret-init", "libexec/lazaret/runsc",
		"share/man/man1/lazaret.1", "share/bash-completion/completions/lazaret", "share/zsh/site-functions/_lazaret", "share/fish/vendor_completions.d/lazaret.fish"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if man, _ := os.ReadFile(filepath.Join(prefix, "share/man/man1/lazaret.1")); !bytes.Contains(man, []byte(".TH lazaret 1")) || !bytes.Contains(man, []byte("doctor")) || !bytes.Contains(man, []byte("remove a stopped Domain")) {
		t.Errorf("man page lacks its header, the doctor command or the rm command:\n%.300s", man)
	}

	ws := workspace(t)
	cfgDir := e.userDir(filepath.Join("install-config-"+randHex(3), "lazaret"))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte("[profiles.agent]\ndescription = \"install test\"\nimage = \"busybox\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(cfgDir, "config.toml"), e.uid, e.gid)
	run := func(dir string, name string, args ...string) result {
		t.Helper()
		if name == "lazaret" {
			name = filepath.Join(prefix, "bin/lazaret") // exec.Command looks up names in the harness's PATH
		}
		c := exec.Command(name, args...)
		c.Dir = dir
		c.Env = []string{
			"HOME=" + e.home, "USER=" + *flagUser, "PATH=" + filepath.Join(prefix, "bin") + ":/usr/local/bin:/usr/bin:/bin",
			"XDG_STATE_HOME=" + e.stateHome, "XDG_RUNTIME_DIR=" + e.runtime, "XDG_CONFIG_HOME=" + filepath.Dir(cfgDir), "LANG=C.UTF-8",
		}
		c.Env = append(c.Env, modelTraceEnv(c.Dir)...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}, Setpgid: true}
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); c.ProcessState == nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return result{out.String(), errb.String(), c.ProcessState.ExitCode()}
	}

	r := run(ws, "lazaret", "version")
	if r.code != 0 {
		t.Fatalf("installed lazaret version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	versions := regexp.MustCompile(`(?m)^(lazaret(?:-cli|-hc|-rs|-gitroute|-escalate|-init)?)\s+(\S+)`).FindAllStringSubmatch(r.stdout, -1)
	if len(versions) != 7 {
		t.Fatalf("version does not list the seven binaries:\n%s", r.stdout)
	}
	for _, v := range versions[1:] {
		if v[2] != versions[0][2] || v[2] == "dev" {
			t.Errorf("%s reports %s, lazaret %s (want one stamped version):\n%s", v[1], v[2], versions[0][2], r.stdout)
		}
	}
	for _, want := range []string{filepath.Join(prefix, "bin/lazaret"), filepath.Join(prefix, "libexec/lazaret/lazaret-cli"), filepath.Join(prefix, "libexec/lazaret/lazaret-hc"), filepath.Join(prefix, "libexec/lazaret/runsc"), "control protocol"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("version output lacks %q:\n%s", want, r.stdout)
		}
	}

	// The configuration's [programs] comes before PREFIX/libexec/lazaret.
	cfg2 := e.userDir(filepath.Join("install-config2-"+randHex(3), "lazaret"))
	if err := os.WriteFile(filepath.Join(cfg2, "config.toml"), []byte("[programs]\nrunsc = \""+e.runsc+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := cfgDir
	cfgDir = cfg2
	r = run(ws, "lazaret", "version")
	cfgDir = saved
	if r.code != 0 || !strings.Contains(r.stdout, "; "+e.runsc+")") {
		t.Errorf("version with [programs] runsc = %s: exit %d\n%s%s", e.runsc, r.code, r.stdout, r.stderr)
	}

	r = run(ws, "lazaret", "doctor")
	if r.code != 0 || strings.Contains(r.stdout, "FAIL") {
		t.Errorf("installed lazaret doctor: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = run(ws, "lazaret", "run", "--profile", "agent", "--", "sh", "-c", "echo installed-run $PWD")
	if r.code != 0 || !strings.Contains(r.stdout, "installed-run /workspace") {
		t.Fatalf("installed lazaret run: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)

	comp := filepath.Join(prefix, "share/bash-completion/completions/lazaret")
	r = run(ws, "bash", "--norc", "--noprofile", "-c", `source "$1"; COMP_WORDS=(lazaret do); COMP_CWORD=1; _lazaret_complete; echo "[${COMPREPLY[*]}]"`, "bash", comp)
	if strings.TrimSpace(r.stdout) != "[doctor]" {
		t.Errorf("bash completion of `lazaret do`: %q (stderr %s)", r.stdout, r.stderr)
	}

	// The alias runs in the current directory (outside a Git repository the
	// directory itself is the workspace): its file appears there.
	sub := filepath.Join(ws, "pkg")
	os.Mkdir(sub, 0o755)
	os.Chown(sub, e.uid, e.gid)
	r = run(sub, "bash", "--norc", "--noprofile", "-c", `eval "$(lazaret alias --shell bash agent=sh)" && type agent >/dev/null && agent -c 'echo alias-run "$PWD" "$1" | tee from-alias' x "two words"`)
	if r.code != 0 || !strings.Contains(r.stdout, "alias-run /workspace two words") {
		t.Fatalf("alias in bash: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(sub, "from-alias")); err != nil || !strings.Contains(string(b), "alias-run") {
		t.Errorf("the alias did not run in the current directory: %v %q", err, b)
	}
	noLeftovers(t)

	// make uninstall, as root like make install, with the same variables.
	mk = exec.Command("make", "--no-print-directory", "-C", repo, "uninstall", "DESTDIR="+dest, "PREFIX=/usr/local")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make uninstall: %v\n%s", err, out)
	}
	after := treeOf(t, dest)
	for p, kind := range after {
		if beforeInstall[p] != kind {
			t.Errorf("make uninstall left %s (%s), which was not there before make install", p, kind)
		}
	}
	for p, kind := range beforeInstall {
		if after[p] != kind {
			t.Errorf("make uninstall removed %s (%s), which make install did not put there", p, kind)
		}
	}
	if _, err := os.Lstat(filepath.Join(prefix, "libexec/lazaret")); err == nil {
		t.Errorf("make uninstall left the empty libexec/lazaret directory")
	}
	// A second uninstall finds nothing to remove and still succeeds.
	mk = exec.Command("make", "--no-print-directory", "-C", repo, "uninstall", "DESTDIR="+dest, "PREFIX=/usr/local")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Errorf("second make uninstall: %v\n%s", err, out)
	}
}

// treeOf lists every entry beneath dir (relative path → "dir", "file" or
// another type).
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type().IsRegular():
			out[rel] = "file"
		default:
			out[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
