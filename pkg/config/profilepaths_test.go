package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestProfilePathsExpandAndSort(t *testing.T) {
	c := mustParse(t, `
[profiles.a]
user = "agent"
profile_paths = ["~/.codex", "/srv/state", "~/.config/gh"]
`)
	a, _ := c.Profile("a")
	if want := []string{"/home/agent/.codex", "/home/agent/.config/gh", "/srv/state"}; !reflect.DeepEqual(a.ProfilePaths, want) {
		t.Fatalf("profile paths %v, want %v", a.ProfilePaths, want)
	}
	// Root's home is /root, itself a default State Anchor: "~" is refused
	// there, "~/.claude" is a directory inside it.
	_, err := parse(t, `
[profiles.r]
profile_paths = ["~"]
`)
	if err == nil || !strings.Contains(err.Error(), "State Anchor /root") || !strings.Contains(err.Error(), "profiles.r.profile_paths") {
		t.Fatalf("~ of root accepted or unclear: %v", err)
	}
	r, _ := mustParse(t, `
[profiles.r]
profile_paths = ["~/.claude"]
`).Profile("r")
	if !reflect.DeepEqual(r.ProfilePaths, []string{"/root/.claude"}) {
		t.Fatalf("root's ~ %v", r.ProfilePaths)
	}
	// [defaults] and the profile are a union; the same directory twice
	// from two layers is one entry.
	d, _ := mustParse(t, `
[defaults]
profile_paths = ["/srv/shared"]
[profiles.x]
user = "agent"
profile_paths = ["/srv/shared", "~/.x"]
`).Profile("x")
	if want := []string{"/home/agent/.x", "/srv/shared"}; !reflect.DeepEqual(d.ProfilePaths, want) {
		t.Fatalf("union %v, want %v", d.ProfilePaths, want)
	}
	if p, _ := Builtin().Profile("default"); p.ProfilePaths == nil || len(p.ProfilePaths) != 0 {
		t.Fatalf("default profile's profile paths %#v, want empty", p.ProfilePaths)
	}
}

func TestProfilePathErrors(t *testing.T) {
	expectErrors(t, `
[profiles.a]
user = "agent"
profile_paths = [
  "",
  "relative/dir",
  "~other/.x",
  "/home/agent/../root",
  "/home//agent",
  "~/./x",
  "/workspace/x",
  "/.lazaret",
  "/home",
  "/usr",
  "/",
  "/etc",
  "/proc/self",
  "/home/agent/a:b",
  "/srv/d", "/srv/d",
  "~/.n", "/home/agent/.n",
  "/srv/d/inner",
]
`,
		at{5, "an entry is empty"},
		at{6, "is relative"},
		at{7, "another user's home"},
		at{8, `contains ".."`},
		at{9, "is not clean: write /home/agent"},
		at{10, "not a clean path below the home directory"},
		at{11, "overlaps /workspace"},
		at{12, "overlaps /.lazaret"},
		at{13, "is the State Anchor /home"},
		at{14, "is the State Anchor /usr"},
		at{15, "/ is the whole sandbox"},
		at{16, "is the State Anchor /etc"},
		at{17, "overlaps /proc"},
		at{18, "contains ','"},
		at{19, "listed twice"},
		at{20, `are both /home/agent/.n`},
		at{21, "is inside /srv/d"},
	)
	// A directory containing an anchor, a volume target, too many entries.
	expectErrors(t, `
[profiles.b]
persistent_paths = ["/srv/data/db"]
profile_paths = ["/srv/data", "/mnt/cache/x"]
[[profiles.b.volumes]]
source = "/tmp"
target = "/mnt/cache"
`,
		at{4, "contains the State Anchor /srv/data/db"},
		at{4, "overlaps the volume target /mnt/cache"},
	)
	var many []string
	for i := 0; i <= MaxProfilePaths; i++ {
		many = append(many, `"/srv/p`+strings.Repeat("x", i)+`"`)
	}
	expectErrors(t, "[profiles.c]\nprofile_paths = ["+strings.Join(many, ", ")+"]\n", at{2, "at most 16"})
	expectErrors(t, "[profiles.c]\nprofile_paths = [\"/srv/"+strings.Repeat("n", 200)+"\"]\n", at{2, "longer than 200 bytes"})
}

func TestProfilePathsBuiltinAgents(t *testing.T) {
	c := Builtin()
	claude, _ := c.Profile("claude")
	codex, _ := c.Profile("codex")
	if !reflect.DeepEqual(claude.ProfilePaths, []string{"/home/agent/.claude"}) || claude.Env["CLAUDE_CONFIG_DIR"] != "/home/agent/.claude" {
		t.Fatalf("claude: profile paths %v, CLAUDE_CONFIG_DIR %q", claude.ProfilePaths, claude.Env["CLAUDE_CONFIG_DIR"])
	}
	if !reflect.DeepEqual(codex.ProfilePaths, []string{"/home/agent/.codex"}) {
		t.Fatalf("codex: profile paths %v", codex.ProfilePaths)
	}
	// A user's file may add paths to a built-in profile.
	p, _ := mustParse(t, "[profiles.claude]\nprofile_paths = [\"~/.config/gh\"]\n").Profile("claude")
	if !reflect.DeepEqual(p.ProfilePaths, []string{"/home/agent/.claude", "/home/agent/.config/gh"}) {
		t.Fatalf("amended claude %v", p.ProfilePaths)
	}
}

func TestProfilePathsFingerprint(t *testing.T) {
	plain, _ := mustParse(t, "[profiles.a]\nuser = \"agent\"\n").Profile("a")
	// Absent, the key is not encoded: profiles without profile paths keep
	// the fingerprint they had before the key existed.
	if strings.Contains(string(plain.Canonical()), "profile_paths") {
		t.Fatalf("canonical encoding of a profile without profile paths mentions them: %s", plain.Canonical())
	}
	with, _ := mustParse(t, "[profiles.a]\nuser = \"agent\"\nprofile_paths = [\"~/.claude\"]\n").Profile("a")
	if with.Fingerprint() == plain.Fingerprint() {
		t.Fatal("profile_paths do not change the fingerprint")
	}
	if d := strings.Join(Diff(plain, with), "; "); !strings.Contains(d, "profile_paths: added /home/agent/.claude") {
		t.Fatalf("diff %q", d)
	}
	q, err := FromCanonical(with.Canonical())
	if err != nil || !reflect.DeepEqual(q.ProfilePaths, with.ProfilePaths) || q.Fingerprint() != with.Fingerprint() {
		t.Fatalf("round trip: %v %v", q, err)
	}
	// The spelling does not matter, the directory does.
	abs, _ := mustParse(t, "[profiles.a]\nuser = \"agent\"\nprofile_paths = [\"/home/agent/.claude\"]\n").Profile("a")
	if abs.Fingerprint() != with.Fingerprint() {
		t.Fatal("~/.claude and /home/agent/.claude fingerprint differently")
	}
}
