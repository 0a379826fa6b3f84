package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigVerbsExitStatus(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = devnull, devnull
	defer func() { os.Stdout, os.Stderr = stdout, stderr }()

	run := func(args ...string) int { return Main(append([]string{"lazaret"}, args...)) }
	// No file: the built-in profiles are valid.
	for _, args := range [][]string{{"config", "check"}, {"config", "check", "--json"}, {"profile", "list"}, {"profile", "list", "--json"}, {"config", "show"}, {"config", "show", "--json", "--profile", "tiny"}} {
		if code := run(args...); code != 0 {
			t.Errorf("%v: exit %d", args, code)
		}
	}
	if code := run("config", "show", "--profile", "nope"); code != 2 {
		t.Errorf("unknown profile: exit %d", code)
	}
	f := filepath.Join(home, ".config", "lazaret", "config.toml")
	os.MkdirAll(filepath.Dir(f), 0o700)
	os.WriteFile(f, []byte("[profiles.a]\nimage = 1\nbogus = true\n"), 0o600)
	for _, args := range [][]string{{"config", "check"}, {"config", "check", "--json"}, {"profile", "list"}} {
		if code := run(args...); code != 2 {
			t.Errorf("%v on an invalid file: exit %d", args, code)
		}
	}
	good := filepath.Join(home, "other.toml")
	os.WriteFile(good, []byte("[profiles.a]\nimage = \"busybox\"\n"), 0o600)
	if code := run("config", "check", "--config", good); code != 0 {
		t.Errorf("--config: exit %d", code)
	}
	if code := run("config", "show", "--config", good, "--profile", "a"); code != 0 {
		t.Errorf("show --config: exit %d", code)
	}
	if code := run("config", "check", "--config", filepath.Join(home, "missing.toml")); code != 2 {
		t.Errorf("missing --config file: exit %d", code)
	}
	// lookupProfile (used by run) reads the default file.
	os.WriteFile(f, []byte("[profiles.a]\nimage = \"busybox\"\n"), 0o600)
	p, err := lookupProfile("a")
	if err != nil || p.ImageName != "busybox" || p.Config.Fingerprint() == "" || p.ConfigPath != f {
		t.Fatalf("lookupProfile: %v %+v", err, p)
	}
	t.Setenv("XDG_DATA_HOME", filepath.Join(home, "data"))
	if _, err := p.ImageRef(); err == nil {
		t.Fatal("missing image layout accepted")
	}
	os.MkdirAll(filepath.Join(home, "data", "lazaret", "images", "busybox"), 0o700)
	os.WriteFile(filepath.Join(home, "data", "lazaret", "images", "busybox", "index.json"), []byte("{}"), 0o600)
	if ref, err := p.ImageRef(); err != nil || ref != "oci:"+filepath.Join(home, "data", "lazaret", "images", "busybox")+":latest" {
		t.Fatalf("imageRef %q %v", ref, err)
	}
}

// TestConfigShowProfileArgument: `config show PROFILE` shows that profile
// only, as --profile does; two names, or options after the name, are
// usage errors that say how to write it.
func TestConfigShowProfileArgument(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	out, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = out, devnull
	code := Main([]string{"lazaret", "config", "show", "tiny"})
	os.Stdout, os.Stderr = stdout, stderr
	b, _ := os.ReadFile(out.Name())
	if code != 0 || !strings.Contains(string(b), "[profiles.tiny]") || strings.Contains(string(b), "[profiles.claude]") {
		t.Errorf("config show tiny: exit %d\n%s", code, b)
	}
	for args, want := range map[string]string{
		"tiny --json":     "options go before the profile name: `lazaret config show --json tiny`",
		"tiny default":    "takes at most one profile name",
		"-p default tiny": "names two profiles",
		"nope":            `unknown profile "nope"`,
	} {
		code, msg := runCaptured(t, append([]string{"config", "show"}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(msg, want) {
			t.Errorf("config show %s: exit %d %q, want 2 and %q", args, code, msg, want)
		}
	}
}
