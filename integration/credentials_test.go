package integration

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// grepTree returns the files under root whose bytes contain any of needles.
func grepTree(t *testing.T, root string, needles ...string) []string {
	t.Helper()
	var hits []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				hits = append(hits, p+" contains "+n)
			}
		}
		return nil
	})
	return hits
}

// TestSpec11CredentialsAreNotConfiguration (spec §1.1: the host
// configuration is trusted, credentials are not part of it): env_pass copies
// a variable of the invoking environment, secrets read one from another
// variable and from a host command's output; all three reach the session's
// printenv, a missing one stops the run before any Domain starts, and no
// value appears in `config show`, the Storage Root (Domain Store, hc.log,
// audit log at debug level) or the runtime directory afterwards.
func TestSpec11CredentialsAreNotConfiguration(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	dir := e.userDir("cred-" + randHex(3))
	passValue := "pass-" + randHex(12)
	envValue := "env-" + randHex(12)
	cmdValue := "cmd-" + randHex(12)
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(cmdValue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(secretFile, e.uid, e.gid)
	cfg := filepath.Join(dir, "config.toml")
	body := `[profiles.cred]
image = "debian"
env_pass = ["LZ_API_KEY"]
secrets.LZ_FROM_ENV = { env = "LZ_HOST_VAR" }
secrets.LZ_FROM_CMD = { command = ["/bin/cat", "` + secretFile + `"] }
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)

	// Missing: a clear error naming both variables, before any Domain.
	r := lzEnv(t, ws, []string{"LZ_HOST_VAR=" + envValue}, nil, "run", "--config", cfg, "-p", "cred", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "LZ_API_KEY (env_pass) is not set in your environment") {
		t.Fatalf("missing env_pass: code %d stderr %q", r.code, r.stderr)
	}
	r = lzEnv(t, ws, []string{"LZ_API_KEY=" + passValue}, nil, "run", "--config", cfg, "-p", "cred", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "secret LZ_FROM_ENV reads LZ_HOST_VAR, which is not set") {
		t.Fatalf("missing secret env: code %d stderr %q", r.code, r.stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.stateHome, "lazaret", "domains")); len(ents) > 0 {
		for _, d := range ents {
			if _, err := os.Stat(filepath.Join(e.stateHome, "lazaret", "domains", d.Name(), "hc.log")); err == nil && strings.HasPrefix(d.Name(), "cred") {
				t.Fatalf("a Domain was started despite a missing credential: %s", d.Name())
			}
		}
	}
	// A failing secret command: named with its status, never its output.
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[profiles.cred]\nimage = \"busybox\"\nsecrets.LZ_X = { command = [\"/bin/false\"] }\n"), 0o600)
	os.Chown(bad, e.uid, e.gid)
	r = lz(t, ws, nil, "run", "--config", bad, "-p", "cred", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, `secret LZ_X: the command { command = ["/bin/false"] } failed (exit status 1)`) {
		t.Fatalf("failing secret command: code %d stderr %q", r.code, r.stderr)
	}

	// Present: every value reaches the session (debug logging on).
	hostEnv := []string{"LZ_API_KEY=" + passValue, "LZ_HOST_VAR=" + envValue, "LAZARET_DEBUG=1"}
	r = lzEnv(t, ws, hostEnv, nil, "run", "--config", cfg, "-p", "cred", "--", "printenv", "LZ_API_KEY", "LZ_FROM_ENV", "LZ_FROM_CMD")
	if r.code != 0 {
		t.Fatalf("run: code %d stderr %s", r.code, r.stderr)
	}
	if want := passValue + "\n" + envValue + "\n" + cmdValue + "\n"; r.stdout != want {
		t.Fatalf("printenv = %q, want %q", r.stdout, want)
	}
	// LZ_HOST_VAR itself is not passed: only what the profile names.
	r = lzEnv(t, ws, hostEnv, nil, "run", "--config", cfg, "-p", "cred", "--", "sh", "-c", "printenv LZ_HOST_VAR || echo absent")
	if strings.TrimSpace(r.stdout) != "absent" {
		t.Fatalf("LZ_HOST_VAR leaked into the session: %q", r.stdout)
	}
	noLeftovers(t)

	show := lzEnv(t, ws, hostEnv, nil, "config", "show", "--config", cfg, "-p", "cred")
	showJSON := lzEnv(t, ws, hostEnv, nil, "config", "show", "--config", cfg, "-p", "cred", "--json")
	for _, out := range []string{show.stdout + show.stderr, showJSON.stdout + showJSON.stderr} {
		for _, v := range []string{passValue, envValue, cmdValue} {
			if strings.Contains(out, v) {
				t.Fatalf("config show prints a credential value:\n%s", out)
			}
		}
	}
	if !strings.Contains(show.stdout, "secrets.LZ_FROM_CMD = <secret>") || !strings.Contains(show.stdout, `env_pass += "LZ_API_KEY"  # value: <secret>`) {
		t.Fatalf("config show does not mark the secrets:\n%s", show.stdout)
	}
	logs := 0
	filepath.WalkDir(e.stateHome, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "hc.log" {
			logs++
		}
		return nil
	})
	if logs == 0 {
		t.Fatalf("no hc.log under %s: the grep below would prove nothing", e.stateHome)
	}
	if hits := grepTree(t, e.stateHome, passValue, envValue, cmdValue); len(hits) > 0 {
		t.Fatalf("credential values in the Storage Root:\n%s", strings.Join(hits, "\n"))
	}
	if hits := grepTree(t, e.runtime, passValue, envValue, cmdValue); len(hits) > 0 {
		t.Fatalf("credential values in the runtime directory:\n%s", strings.Join(hits, "\n"))
	}
}
