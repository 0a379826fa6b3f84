package cli

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestParseRm(t *testing.T) {
	for _, c := range []struct {
		f    rmFlags
		want rmOptions
		err  string
	}{
		{f: rmFlags{profile: "default"}, want: rmOptions{profile: "default"}},
		{f: rmFlags{profile: "tiny", profileSet: true, dirSet: true, yes: true}, want: rmOptions{profile: "tiny", yes: true}},
		{f: rmFlags{profile: "default", all: true, images: true, json: true}, want: rmOptions{profile: "default", all: true, images: true, json: true}},
		// Flags after an argument (urfave/cli stops at the first one).
		{f: rmFlags{profile: "default", args: []string{"--all", "--images", "-y", "--json"}}, want: rmOptions{profile: "default", all: true, images: true, yes: true, json: true}},
		{f: rmFlags{profile: "default", args: []string{"/some/path"}}, err: "takes no arguments"},
		{f: rmFlags{profile: "default", images: true}, err: "--images goes with --all"},
		{f: rmFlags{profile: "tiny", all: true, profileSet: true}, err: "give no --profile or --dir"},
		{f: rmFlags{profile: "default", all: true, dirSet: true}, err: "give no --profile or --dir"},
		{f: rmFlags{profile: "../x"}, err: "not a profile name"},
		{f: rmFlags{profile: "default", olderThan: "30d", yes: true}, want: rmOptions{profile: "default", olderThan: 30 * 24 * time.Hour, yes: true}},
		{f: rmFlags{profile: "default", olderThan: "30d", all: true}, err: "give no --all, --profile or --dir"},
		{f: rmFlags{profile: "tiny", olderThan: "12h", profileSet: true}, err: "give no --all, --profile or --dir"},
		{f: rmFlags{profile: "default", olderThan: "soon"}, err: "give a positive age such as 30d"},
		{f: rmFlags{profile: "default", domainID: "3fa88f5df319960ebf838170fa3a1135", yes: true}, want: rmOptions{profile: "default", domainID: "3fa88f5df319960ebf838170fa3a1135", yes: true}},
		{f: rmFlags{profile: "default", domainID: "../etc"}, err: "is not a Domain ID"},
		{f: rmFlags{profile: "tiny", domainID: "3fa88f5df319960ebf838170fa3a1135", profileSet: true}, err: "--domain names one Domain"},
		{f: rmFlags{profile: "default", domainID: "3fa88f5df319960ebf838170fa3a1135", olderThan: "1d"}, err: "--domain names one Domain"},
		{f: rmFlags{profile: "default", domainID: "3fa88f5df319960ebf838170fa3a1135", all: true}, err: "--domain names one Domain"},
	} {
		got, err := parseRm(c.f)
		if c.err != "" {
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want ErrInvalid %q", c.f, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %+v %v, want %+v", c.f, got, err, c.want)
		}
	}
}

// rmEnv points the Storage Root, runtime and data directories into a
// temporary home and returns the home and a workspace in it.
func rmEnv(t *testing.T) (home, ws string) {
	home = t.TempDir()
	for k, v := range map[string]string{"HOME": home, "XDG_STATE_HOME": filepath.Join(home, "state"), "XDG_RUNTIME_DIR": filepath.Join(home, "run"),
		"XDG_DATA_HOME": filepath.Join(home, "data"), "XDG_CONFIG_HOME": filepath.Join(home, "config"), "LAZARET_RS": filepath.Join(home, "no-lazaret-rs")} {
		t.Setenv(k, v)
	}
	ws = filepath.Join(home, "ws")
	os.MkdirAll(ws, 0o755)
	return home, ws
}

// runCaptured runs lazaret with args and returns its exit status and
// stderr.
func runCaptured(t *testing.T, args ...string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = devnull, f
	code := Main(append([]string{"lazaret"}, args...))
	os.Stdout, os.Stderr = stdout, stderr
	b, _ := os.ReadFile(f.Name())
	return code, string(b)
}

// fakeDomain creates the Domain Root of profile default and ws as a
// stopped Domain leaves it.
func fakeDomain(t *testing.T, home, ws string) domain.Paths {
	t.Helper()
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	canon, _ := filepath.EvalSymlinks(ws)
	paths, err := domain.PathsFor(roots, domain.DeriveID("default", canon))
	if err != nil {
		t.Fatal(err)
	}
	if err := domain.EnsurePrivateDir(filepath.Join(paths.DomainRoot, "anchors"), os.Getuid()); err != nil {
		t.Fatal(err)
	}
	os.Chmod(roots.Storage, 0o700)
	os.Chmod(filepath.Dir(paths.DomainRoot), 0o700)
	if err := domain.VerifyOrRecordIdentity(paths, "default", canon); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(paths.LockFile(), nil, 0o600)
	return paths
}

// TestRmRefusals: usage errors exit 2; nothing to remove is success;
// without a terminal --yes is required; an active Domain, one that needs
// recovery, and a missing lazaret-rs are refused before anything moves.
func TestRmRefusals(t *testing.T) {
	if os.Geteuid() == 0 {
		// rm refuses root; the rest runs as a developer would, in this
		// test binary re-executed as nobody.
		if code, msg := runCaptured(t, "rm", "--all", "--yes"); code != ExitLazaret || !strings.Contains(msg, "not as root") {
			t.Errorf("as root: exit %d %s", code, msg)
		}
		asNobody(t, "^TestRmRefusals$")
		return
	}
	home, ws := rmEnv(t)
	for _, args := range [][]string{{"rm", "extra"}, {"rm", "--images"}, {"rm", "--all", "-p", "tiny"}, {"rm", "-p", "Bad!"}} {
		if code, msg := runCaptured(t, args...); code != 2 {
			t.Errorf("%v: exit %d %s", args, code, msg)
		}
	}
	if code, msg := runCaptured(t, "rm", "--all", "--images"); code != 0 {
		t.Errorf("rm --all with nothing stored: exit %d %s", code, msg)
	}
	if code, msg := runCaptured(t, "rm", "-C", ws); code != 0 {
		t.Errorf("rm of a Domain that never ran: exit %d %s", code, msg)
	}
	paths := fakeDomain(t, home, ws)
	intact := func(what string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(paths.DomainRoot, "domain.json")); err != nil {
			t.Fatalf("%s: the Domain Root was touched: %v", what, err)
		}
	}
	if !runverb.IsTerminal(0) {
		t.Setenv("LAZARET_RS", "/bin/true") // found; never run without --yes
		code, msg := runCaptured(t, "rm", "-C", ws)
		t.Setenv("LAZARET_RS", filepath.Join(home, "no-lazaret-rs"))
		if code != 2 || !strings.Contains(msg, "--yes") || !strings.Contains(msg, string(paths.ID)) {
			t.Errorf("without a terminal or --yes: exit %d %s", code, msg)
		}
		intact("no --yes")
	}
	// lazaret-rs is missing (LAZARET_RS points nowhere): refused first.
	if code, msg := runCaptured(t, "rm", "-C", ws, "--yes"); code == 0 || !strings.Contains(msg, "lazaret-rs") {
		t.Errorf("without lazaret-rs: exit %d %s", code, msg)
	}
	intact("no lazaret-rs")

	// Active: a coordinator holds the lock and answers on the socket.
	lock, err := os.OpenFile(paths.LockFile(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(paths.RuntimeDir, 0o700)
	l, err := net.Listen("unix", paths.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"rm", "-C", ws, "--yes"}, {"rm", "--all", "--yes"}} {
		if code, msg := runCaptured(t, args...); code != ExitLazaret || !strings.Contains(msg, "is active") || !strings.Contains(msg, "--yes does not bypass") {
			t.Errorf("%v on an active Domain: exit %d %s", args, code, msg)
		}
		intact("active")
	}
	l.Close()
	lock.Close()

	// Crashed: nothing holds the lock but the runtime directory remains.
	os.Remove(paths.ControlSocket())
	for _, args := range [][]string{{"rm", "-C", ws, "--yes"}, {"rm", "--all", "--yes"}} {
		if code, msg := runCaptured(t, args...); code != ExitLazaret || !strings.Contains(msg, "needs recovery") || !strings.Contains(msg, "lazaret run -C "+ws) {
			t.Errorf("%v on a Domain that needs recovery: exit %d %s", args, code, msg)
		}
		intact("needs recovery")
	}
}

// asNobody runs the tests matching pattern in a copy of this test binary
// as the user nobody (uid/gid 65534) and fails t with their output if they
// fail.
func asNobody(t *testing.T, pattern string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // the test's temporary root
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "cli.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(bin, "-test.run", pattern, "-test.count=1", "-test.v")
	c.Dir = "/"
	c.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + os.TempDir()}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: ") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "1d": 24 * time.Hour} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0d", "-3d", "d", "3x", "3.5d", "0s", "-1h", "30 d", "99999999999d"} {
		if _, err := parseAge(in); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("parseAge(%q): %v, want ErrInvalid", in, err)
		}
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{10 * time.Second: "just now", 5 * time.Minute: "5m ago", 3 * time.Hour: "3h ago", 47 * time.Hour: "47h ago", 40 * 24 * time.Hour: "40d ago"} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago(%s) = %q, want %q", d, got, want)
		}
	}
	if got := ago(now, time.Time{}); got != "unknown" {
		t.Errorf("ago(zero) = %q", got)
	}
}
