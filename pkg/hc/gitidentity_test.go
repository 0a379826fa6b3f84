package hc

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lazaret/lazaret/pkg/proc"
)

// TestHostGitIdentity reads the developer's Git identity with the real git:
// the repository's own setting wins over the global one, as `git config
// --get` would answer, and nothing set is no identity.
func TestHostGitIdentity(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed (apt-get install git): %v", err)
	}
	home, ws, bare := t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[user]\n\tname = Global Name\n\temail = global@example.invalid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", ws}, {"-C", ws, "config", "user.email", "local@example.invalid"}, {"init", "-q", bare}} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	b, err := proc.NewBroker(slog.New(slog.DiscardHandler), os.Args[0])
	if err != nil {
		t.Fatal(err)
	}

	t.Setenv("HOME", home)
	c := &coordinator{broker: b, ws: ws}
	want := []gitSetting{{"user.name", "Global Name"}, {"user.email", "local@example.invalid"}}
	if got := c.readHostGitIdentity()(); !reflect.DeepEqual(got, want) {
		t.Errorf("identity = %q, want %q", got, want)
	}
	t.Setenv("HOME", t.TempDir()) // no global configuration
	c = &coordinator{broker: b, ws: bare}
	if got := c.readHostGitIdentity()(); got != nil {
		t.Errorf("identity without any configuration = %q, want none", got)
	}
}

// TestParseGitIdentity: the last value of each key wins (Git lists its
// files from system to repository), empty values and keys without a value
// are no identity, and values keep inner spaces and newlines.
func TestParseGitIdentity(t *testing.T) {
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
	} {
		if got := parseGitIdentity([]byte(tc.out)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseGitIdentity(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
