package hc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
)

// TestHostGitConfig reads the developer's Git configuration with the real
// git through the broker: the identity (the repository's own setting wins
// over the global one, as `git config --get` would answer; nothing set is
// no identity), the guarded paths, and a configuration host Git cannot
// read fails with what Git said.
func TestHostGitConfig(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed (apt-get install git): %v", err)
	}
	home, bare := t.TempDir(), t.TempDir()
	ws, _ := filepath.EvalSymlinks(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = Global Name\n\temail = global@example.invalid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", ws}, {"-C", ws, "config", "user.email", "local@example.invalid"}, {"-C", ws, "config", "core.hooksPath", ".husky"}, {"init", "-q", bare}} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	b := proctest.SelfBroker(t)

	t.Setenv("HOME", home)
	c := &coordinator{broker: b, cfg: generationConfig{workspace: ws}}
	r, err := c.readHostGitConfig()()
	if err != nil {
		t.Fatal(err)
	}
	want := []gitSetting{{"user.name", "Global Name"}, {"user.email", "local@example.invalid"}}
	if got := gitIdentity(r.Effective); !reflect.DeepEqual(got, want) {
		t.Errorf("identity = %q, want %q", got, want)
	}
	var guarded []string
	for _, p := range r.Paths {
		guarded = append(guarded, fmt.Sprintf("%s:%v", p.Rel, p.Tree))
	}
	if strings.Join(guarded, " ") != ".git/config:false .husky:true" {
		t.Errorf("guarded paths: %v", guarded)
	}
	t.Setenv("HOME", t.TempDir()) // no global configuration
	c = &coordinator{broker: b, cfg: generationConfig{workspace: bare}}
	if r, err := c.readHostGitConfig()(); err != nil || gitIdentity(r.Effective) != nil {
		t.Errorf("identity without any configuration = %q (%v), want none", gitIdentity(r.Effective), err)
	}
	// A configuration file host Git cannot parse.
	os.WriteFile(filepath.Join(bare, ".git", "config"), []byte("[core\n"), 0o644)
	if _, err := c.readHostGitConfig()(); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("broken configuration: %v", err)
	}
}

// TestGitIdentity: the last value of each key wins (Git lists its files
// from system to worktree), empty values and keys without a value are no
// identity, and values keep inner spaces and newlines.
func TestGitIdentity(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want []gitSetting
	}{
		{"", nil},
		{"user.name\nA\x00user.name\nB\x00", []gitSetting{{"user.name", "B"}}},
		{"user.email\na@x.invalid\x00user.name\nAnn  Lee\x00", []gitSetting{{"user.name", "Ann  Lee"}, {"user.email", "a@x.invalid"}}},
		{"user.name\nA\x00user.name\n\x00", nil},
		{"user.name\x00user.email\ne@x.invalid\x00", []gitSetting{{"user.email", "e@x.invalid"}}},
		{"user.name\nTwo\nLines\x00", []gitSetting{{"user.name", "Two\nLines"}}},
		{"User.Name\nMixed Case\x00", []gitSetting{{"user.name", "Mixed Case"}}},
	} {
		var list []byte
		for _, e := range strings.Split(tc.out, "\x00") {
			if e != "" {
				list = append(list, "global\x00file:/h/.gitconfig\x00"+e+"\x00"...)
			}
		}
		ents, err := gitconfigguard.Parse(list)
		if err != nil {
			t.Fatal(err)
		}
		if got := gitIdentity(ents); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("gitIdentity(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
