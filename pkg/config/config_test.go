package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/imagebuild"
)

const sample = `# host configuration
[defaults]
persistent_paths = ["/root/.cache"]
[defaults.network]
deny = ["203.0.113.0/24"]
dns = ["1.1.1.1"]
[defaults.env]
EDITOR = "vi"

[profiles.coder]
description = "Coder"
image = "debian"
persistent_paths = ["/root/.coder", "/root/.npm"]
ignored_path_isolation = false
env = { CLAUDE_CONFIG_DIR = "/root/.coder", EDITOR = "nano" }
auto_approve = [["git", "fetch"], ["go", "test", "./..."]]

[profiles.coder.network]
allow = ["10.1.2.0/24"]

[[profiles.coder.volumes]]
source = "~/.cache/go-build"
target = "/root/.cache/go-build"
mode = "rw"

[profiles.tiny]
share_editor_config = true
`

func parse(t *testing.T, src string) (*Config, error) {
	t.Helper()
	return Parse("/home/dev/.config/lazaret/config.toml", []byte(src), Options{Home: "/home/dev"})
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := parse(t, src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

func TestBuiltinProfilesWithoutFile(t *testing.T) {
	c := Builtin()
	if got := c.Names(); !reflect.DeepEqual(got, []string{"claude", "codex", "default", "node", "tiny"}) {
		t.Fatalf("names %v", got)
	}
	d, err := c.Profile("default")
	if err != nil {
		t.Fatal(err)
	}
	if d.Image != "debian" || !d.IgnoredPathIsolation || !d.IgnoredBinds || d.ShareEditorConfig || !d.Builtin {
		t.Fatalf("default profile %+v", d)
	}
	if !reflect.DeepEqual(d.Network.Deny, DefaultDeny) && len(d.Network.Deny) != len(DefaultDeny) {
		t.Fatalf("default deny %v", d.Network.Deny)
	}
	tiny, _ := c.Profile("tiny")
	if tiny.Image != "busybox" {
		t.Fatalf("tiny image %q", tiny.Image)
	}
	if _, err := c.Profile("nope"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "default, node, tiny") {
		t.Fatalf("unknown profile: %v", err)
	}
}

func TestBuiltinImagesMatchImageBuild(t *testing.T) {
	kinds := imagebuild.Kinds()
	for _, b := range builtinProfiles {
		if !contains(kinds, b.image) {
			t.Errorf("built-in profile %s uses image %q that `lazaret image build` cannot build (%v)", b.name, b.image, kinds)
		}
	}
	for _, n := range BuiltinImages() {
		if !contains(kinds, n) {
			t.Errorf("built-in image %q is not an imagebuild kind %v", n, kinds)
		}
	}
}

func TestProfileNamePatternMatchesDomain(t *testing.T) {
	for _, n := range []string{"a", "default", "coder-code", "x.y_z", "0", strings.Repeat("a", 63), "", "A", "-x", "a b", strings.Repeat("a", 64), "é"} {
		if ValidProfileName(n) != domain.ValidProfileName(n) {
			t.Errorf("%q: config %v, domain %v", n, ValidProfileName(n), domain.ValidProfileName(n))
		}
	}
}

func TestSampleLayering(t *testing.T) {
	c := mustParse(t, sample)
	if got := c.Names(); !reflect.DeepEqual(got, []string{"claude", "coder", "codex", "default", "node", "tiny"}) {
		t.Fatalf("names %v", got)
	}
	p, _ := c.Profile("coder")
	if p.Builtin || p.Description != "Coder" || p.IgnoredPathIsolation {
		t.Fatalf("coder %+v", p)
	}
	if want := DefaultPersistentPaths; !reflect.DeepEqual(p.PersistentPaths, want) { // /root/... absorbed by /root
		t.Errorf("persistent %v", p.PersistentPaths)
	}
	if p.Env["EDITOR"] != "nano" || p.Env["CLAUDE_CONFIG_DIR"] != "/root/.coder" {
		t.Errorf("env %v", p.Env)
	}
	if len(p.Network.Deny) != len(DefaultDeny)+1 || !containsPrefix(p.Network.Deny, "203.0.113.0/24") {
		t.Errorf("deny %v", p.Network.Deny)
	}
	if !reflect.DeepEqual(p.Network.Allow, []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}) {
		t.Errorf("allow %v", p.Network.Allow)
	}
	if len(p.Network.DNS) != 1 || p.Network.DNS[0].String() != "1.1.1.1" {
		t.Errorf("dns %v", p.Network.DNS)
	}
	if want := []Volume{{Source: "/home/dev/.cache/go-build", Target: "/root/.cache/go-build"}}; !reflect.DeepEqual(p.Volumes, want) {
		t.Errorf("volumes %+v", p.Volumes)
	}
	if len(p.AutoApprove) != 2 || !p.AutoApprove[0].Matches([]string{"git", "fetch", "origin"}, "") {
		t.Errorf("rules %+v", p.AutoApprove)
	}
	tiny, _ := c.Profile("tiny")
	if !tiny.Builtin || tiny.Image != "busybox" || !tiny.ShareEditorConfig || tiny.Env["EDITOR"] != "vi" {
		t.Errorf("tiny amended %+v", tiny)
	}
	def, _ := c.Profile("default")
	if !reflect.DeepEqual(def.PersistentPaths, DefaultPersistentPaths) || def.Image != "debian" {
		t.Errorf("default gets [defaults]: %+v", def)
	}
}

func TestDefaultsImageDoesNotOverrideBuiltinProfileImage(t *testing.T) {
	c := mustParse(t, "[defaults]\nimage = \"docker://docker.io/library/alpine:3\"\n[profiles.x]\n")
	tiny, _ := c.Profile("tiny")
	x, _ := c.Profile("x")
	if tiny.Image != "busybox" || x.Image != "docker://docker.io/library/alpine:3" {
		t.Fatalf("tiny %q x %q", tiny.Image, x.Image)
	}
	c = mustParse(t, "[profiles.tiny]\nimage = \"debian\"\n")
	tiny, _ = c.Profile("tiny")
	if tiny.Image != "debian" {
		t.Fatalf("file must override built-in image: %q", tiny.Image)
	}
}

func containsPrefix(ps []netip.Prefix, s string) bool {
	for _, p := range ps {
		if p.String() == s {
			return true
		}
	}
	return false
}

// expectErrors parses src and checks that each want (line, substring)
// appears among the errors, and that there are exactly len(want) errors.
func expectErrors(t *testing.T, src string, want ...struct {
	line int
	sub  string
}) Errors {
	t.Helper()
	_, err := parse(t, src)
	if err == nil {
		t.Fatalf("accepted:\n%s", src)
	}
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("not ErrInvalid: %v", err)
	}
	es, ok := AsErrors(err)
	if !ok {
		t.Fatalf("not Errors: %T %v", err, err)
	}
	for _, w := range want {
		found := false
		for _, e := range es {
			if e.Line == w.line && strings.Contains(e.Error(), w.sub) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error at line %d containing %q in:\n%v", w.line, w.sub, err)
		}
	}
	if len(es) != len(want) {
		t.Errorf("want %d errors, got %d:\n%v", len(want), len(es), err)
	}
	for _, e := range es {
		if !strings.HasPrefix(e.Error(), "/home/dev/.config/lazaret/config.toml:") {
			t.Errorf("error without file:line: %q", e.Error())
		}
	}
	return es
}

type at = struct {
	line int
	sub  string
}

func TestUnknownKeys(t *testing.T) {
	expectErrors(t, `
color = "red"
[profiles.a]
imgae = "debian"
[profiles.a.network]
allowed = ["1.2.3.0/24"]
[[profiles.a.volumes]]
source = "/srv"
target = "/srv"
readonly = true
`,
		at{2, `unknown key "color"`},
		at{4, `unknown key "imgae" (did you mean "image"?): the keys allowed here are description, image`},
		at{6, `unknown key "allowed"`},
		at{10, `unknown key "readonly"`},
	)
}

func TestErrorsCarryColumnAndKey(t *testing.T) {
	es := expectErrors(t, "[profiles.a]\nimage = 42\n", at{2, "must be a string, not an integer"})
	if es[0].Column != 9 || es[0].Key != "profiles.a.image" {
		t.Fatalf("position %d:%d key %q", es[0].Line, es[0].Column, es[0].Key)
	}
}

func TestBadPrefixes(t *testing.T) {
	expectErrors(t, `[profiles.a.network]
allow = [
  "10.0.0.1/8",
  "192.168.1.7",
  "2001:db8::/32",
  "nonsense",
]
dns = ["8.8.8.8", "::1", "127.0.0.1", "8.8.8.8"]
`,
		at{3, "10.0.0.1/8 is not canonical (host bits are set): write 10.0.0.0/8"},
		at{4, `"192.168.1.7" is an address, not a prefix: write 192.168.1.7/32`},
		at{5, "is not IPv4"},
		at{6, `"nonsense" is not an IPv4 prefix`},
		at{8, "::1 is not IPv4"},
		at{8, "127.0.0.1 is the sandbox's own loopback"},
		at{8, "resolver 8.8.8.8 is listed twice (also at line 8)"},
	)
}

func TestAllowDenyConflictNamesBoth(t *testing.T) {
	expectErrors(t, `[defaults.network]
deny = ["198.51.100.0/24"]
[profiles.a.network]
allow = ["198.51.100.0/24", "10.0.0.0/8"]
deny = ["198.51.100.0/24"]
`,
		at{4, `198.51.100.0/24 is both allowed (line 4) and denied (line 5)`},
		at{4, `10.0.0.0/8 is both allowed (line 4) and denied (built-in default deny)`},
	)
	// The fix for a built-in deny names the two halves.
	_, err := parse(t, "[profiles.a.network]\nallow = [\"10.0.0.0/8\"]\n")
	if err == nil || !strings.Contains(err.Error(), "10.0.0.0/9 and 10.128.0.0/9") {
		t.Fatalf("fix: %v", err)
	}
	// Equal-prefix conflict with [defaults] in a profile.
	_, err = parse(t, "[defaults.network]\ndeny = [\"198.51.100.0/24\"]\n[profiles.a.network]\nallow = [\"198.51.100.0/24\"]\n")
	if err == nil || !strings.Contains(err.Error(), "denied ([defaults] line 2)") {
		t.Fatalf("defaults conflict: %v", err)
	}
	// A more specific allow inside a default deny is fine.
	c := mustParse(t, "[profiles.a.network]\nallow = [\"10.0.0.0/9\", \"192.168.1.0/24\"]\n")
	a, _ := c.Profile("a")
	if len(a.Network.Allow) != 2 {
		t.Fatal(a.Network.Allow)
	}
}

func TestDuplicateProfiles(t *testing.T) {
	expectErrors(t, "[profiles.a]\nimage = \"debian\"\n\n[profiles.a]\nimage = \"busybox\"\n",
		at{4, `profile "a" is defined twice`})
	expectErrors(t, "[profiles.a]\nimage = \"debian\"\nimage = \"busybox\"\n",
		at{3, "image is set twice (also at line 2)"})
}

func TestRelativePaths(t *testing.T) {
	expectErrors(t, `[profiles.a]
persistent_paths = ["root/.cache", "/root/../etc", "/workspace/x", "/", "/proc"]
[[profiles.a.volumes]]
source = "data"
target = "relative"
[[profiles.a.volumes]]
source = "~other/x"
target = "/x"
mode = "wo"
`,
		at{2, `"root/.cache" is relative: guest paths are absolute, e.g. /root/.cache`},
		at{2, `"/root/../etc" is not clean: write /etc`},
		at{2, "/workspace/x is inside /workspace"},
		at{2, "/ is the whole sandbox"},
		at{2, "/proc is inside /proc"},
		at{4, `"data" is relative: host paths must be absolute`},
		at{5, `"relative" is relative`},
		at{7, "only ~/ (your own home) is expanded"},
		at{9, `mode must be "ro"`},
	)
}

func TestVolumeRules(t *testing.T) {
	expectErrors(t, `[[profiles.a.volumes]]
source = "/"
target = "/host"
[[profiles.a.volumes]]
source = "~"
target = "/home"
[[profiles.a.volumes]]
target = "/x"
[[profiles.a.volumes]]
source = "/srv/a"
target = "/data"
[[profiles.a.volumes]]
source = "/srv/b"
target = "/data"
`,
		at{2, "/ would expose the whole host"},
		at{5, "your home directory would expose"},
		at{7, "a volume needs source"},
		at{14, "target /data is also the target of the volume at line 9"},
	)
}

func TestPersistentNestingAndVolumeClash(t *testing.T) {
	expectErrors(t, `[defaults]
persistent_paths = ["/root"]
[profiles.a]
persistent_paths = ["/root/.npm", "/opt", "/opt"]
[[profiles.a.volumes]]
source = "/srv"
target = "/opt"
`,
		at{4, "/root/.npm is inside /root ([defaults] line 2)"},
		at{4, `"/opt" is listed twice`},
		at{7, "/opt is both a persistent path"},
	)
}

func TestBadProfileNames(t *testing.T) {
	expectErrors(t, "[profiles.Claude]\n[profiles.\"my agent\"]\n[profiles.-x]\n",
		at{1, `bad profile name "Claude"`},
		at{2, `bad profile name "my agent"`},
		at{3, `bad profile name "-x"`},
	)
	_, err := parse(t, "[profiles.Claude]\n")
	if err == nil || !strings.Contains(err.Error(), `(e.g. "claude")`) {
		t.Fatalf("suggestion: %v", err)
	}
}

func TestEnvRules(t *testing.T) {
	expectErrors(t, `[profiles.a.env]
PATH = "/root/.local/bin:/usr/bin:/bin"
LAZARET_X = "1"
HOSTNAME = "h"
TERM = "xterm"
LC_ALL = "C"
GIT_CONFIG_KEY_0 = "user.name"
"1BAD" = "x"
OK = 5
`,
		at{3, "LAZARET_X is set by Lazaret"},
		at{4, "HOSTNAME is set by Lazaret"},
		at{5, "TERM is passed from your terminal"},
		at{6, "LC_ALL is passed from your terminal"},
		at{7, "GIT_CONFIG_KEY_0 carries your Git identity"},
		at{8, `"1BAD" is not an environment variable name`},
		at{9, "must be a string, not an integer"},
	)
}

func TestAutoApproveRefusesShells(t *testing.T) {
	expectErrors(t, `[profiles.a]
auto_approve = [
  ["sh", "-c", "make"],
  ["/bin/bash"],
  ["env", "git"],
  ["python3", "-c"],
  ["python3.11"],
  ["git", "log | cat"],
  ["git", "fetch origin"],
  ["git", "$(id)"],
  ["./run.sh"],
  [],
  ["sudo", "apt"],
  ["busybox", "ls"],
]
`,
		at{3, "sh is a shell or command runner"},
		at{4, "/bin/bash is a shell"},
		at{5, "env is a shell or command runner"},
		at{6, "python3 runs code from its arguments"},
		at{7, "python3.11 runs code from its arguments"},
		at{8, `contains the shell metacharacter "|"`},
		at{9, `split it into separate elements: ["fetch" "origin"]`},
		at{10, `shell metacharacter "$"`},
		at{11, "is a relative path"},
		at{2, "auto_approve[9]: an empty rule would approve every command"},
		at{13, "sudo is a shell"},
		at{14, "busybox is a shell"},
	)
	c := mustParse(t, "[profiles.a]\nauto_approve = [[\"python3\", \"scripts/check.py\"], [\"go\", \"test\", \"-run=TestX\"], [\"/usr/bin/git\", \"status\"]]\n")
	a, _ := c.Profile("a")
	if len(a.AutoApprove) != 3 {
		t.Fatal(a.AutoApprove)
	}
}

func TestRuleMatches(t *testing.T) {
	prefix := Rule{Match: MatchPrefix, Argv: []string{"git", "fetch"}}
	exact := Rule{Match: MatchExact, Argv: []string{"git", "fetch"}}
	inAPI := Rule{Match: MatchExact, Argv: []string{"make", "lint"}, Cwd: "services/api"}
	underSvc := Rule{Match: MatchPrefix, Argv: []string{"go", "test"}, Cwd: "services", CwdSubtree: true}
	rootOnly := Rule{Match: MatchExact, Argv: []string{"true"}, Cwd: "."}
	rootTree := Rule{Match: MatchExact, Argv: []string{"true"}, Cwd: ".", CwdSubtree: true}
	cases := []struct {
		name string
		r    Rule
		argv []string
		cwd  string
		want bool
	}{
		{"prefix: same argv", prefix, []string{"git", "fetch"}, "", true},
		{"prefix: extra argument", prefix, []string{"git", "fetch", "--all"}, "", true},
		{"prefix: shorter", prefix, []string{"git"}, "", false},
		{"prefix: element is not a prefix of a string", prefix, []string{"git", "fetch2"}, "", false},
		{"prefix: other subcommand", prefix, []string{"git", "push"}, "", false},
		{"prefix: program path differs", prefix, []string{"/usr/bin/git", "fetch"}, "", false},
		{"prefix: any cwd", prefix, []string{"git", "fetch"}, "a/b", true},
		{"exact: same argv", exact, []string{"git", "fetch"}, "", true},
		{"exact: extra argument", exact, []string{"git", "fetch", "--all"}, "", false},
		{"exact: extra empty argument", exact, []string{"git", "fetch", ""}, "", false},
		{"exact: shorter", exact, []string{"git"}, "", false},
		{"cwd exact: that dir", inAPI, []string{"make", "lint"}, "services/api", true},
		{"cwd exact: subdir refused", inAPI, []string{"make", "lint"}, "services/api/v2", false},
		{"cwd exact: parent refused", inAPI, []string{"make", "lint"}, "services", false},
		{"cwd exact: root refused", inAPI, []string{"make", "lint"}, "", false},
		{"cwd exact: sibling with the same prefix refused", inAPI, []string{"make", "lint"}, "services/api2", false},
		{"cwd exact: dot-dot back in refused", inAPI, []string{"make", "lint"}, "services/x/../api", false},
		{"cwd exact: trailing slash refused", inAPI, []string{"make", "lint"}, "services/api/", false},
		{"cwd exact: ./ refused", inAPI, []string{"make", "lint"}, "./services/api", false},
		{"cwd exact: absolute refused", inAPI, []string{"make", "lint"}, "/workspace/services/api", false},
		{"cwd exact: double slash refused", inAPI, []string{"make", "lint"}, "services//api", false},
		{"cwd subtree: the dir", underSvc, []string{"go", "test", "./..."}, "services", true},
		{"cwd subtree: beneath", underSvc, []string{"go", "test"}, "services/api/v2", true},
		{"cwd subtree: sibling with the same prefix refused", underSvc, []string{"go", "test"}, "services2", false},
		{"cwd subtree: sibling with the same prefix and a subdir refused", underSvc, []string{"go", "test"}, "services-old/api", false},
		{"cwd subtree: parent refused", underSvc, []string{"go", "test"}, "", false},
		{"cwd subtree: escape refused", underSvc, []string{"go", "test"}, "services/../etc", false},
		{"cwd subtree: out of the workspace refused", underSvc, []string{"go", "test"}, "../services", false},
		{"cwd root exact: root", rootOnly, []string{"true"}, "", true},
		{"cwd root exact: dot", rootOnly, []string{"true"}, ".", true},
		{"cwd root exact: subdir refused", rootOnly, []string{"true"}, "a", false},
		{"cwd root subtree: subdir", rootTree, []string{"true"}, "a/b", true},
		{"cwd root subtree: parent refused", rootTree, []string{"true"}, "..", false},
	}
	for _, c := range cases {
		if got := c.r.Matches(c.argv, c.cwd); got != c.want {
			t.Errorf("%s: %s matches %q in %q = %v, want %v", c.name, c.r, c.argv, c.cwd, got, c.want)
		}
	}
	// A command that requires a shell never matches, whatever the rule
	// (hand-built rules here: the parser refuses them).
	for _, argv := range [][]string{
		{"sh", "-c", "x"},
		{"bash", "-c", "x"},
		{"/bin/sh", "-c", "x"},
		{"/usr/bin/bash", "script.sh"},
		{"bash5.2", "-c", "x"},
		{"env", "sh", "-c", "x"},
		{"/usr/bin/env", "-i", "bash", "-c", "x"},
		{"busybox", "sh", "-c", "x"},
		{"sudo", "sh"},
		{"nice", "-n", "5", "sh", "-c", "x"},
		{"xargs", "sh", "-c", "x"},
		{"taskset", "1", "sh", "-c", "x"},
		{"chrt", "0", "/bin/dash", "-ec", "x"},
		{"git", "fetch", "--upload-pack=sh -c id"},
		{"git", "fetch", "--upload-pack", "bash -lc id"},
		{"python3", "-c", "x"},
		{"perl", "-e", "x"},
		{"node"},
		{"awk", "-f", "x.awk"},
	} {
		for _, r := range []Rule{{Match: MatchPrefix, Argv: argv[:1]}, {Match: MatchExact, Argv: argv}, {Match: MatchPrefix, Argv: argv}} {
			if r.Matches(argv, "") {
				t.Errorf("%s matched %q, which requires a shell", r, argv)
			}
		}
		if !RequiresShell(argv) {
			t.Errorf("RequiresShell(%q) = false", argv)
		}
	}
	for _, argv := range [][]string{{"git", "fetch"}, {"go", "test", "-count=1", "./..."}, {"python3", "scripts/check.py", "-c"}, {"make", "SHELL=/bin/bash"}, {"grep", "-c", "sh"}} {
		if RequiresShell(argv) {
			t.Errorf("RequiresShell(%q) = true", argv)
		}
	}
	if (Rule{Match: MatchPrefix}).Matches([]string{"git"}, "") {
		t.Error("empty rule matched")
	}
	if (Rule{Argv: []string{"git"}}).Matches([]string{"git"}, "") {
		t.Error("rule without a kind matched")
	}
}

func TestRuleSyntax(t *testing.T) {
	c := mustParse(t, `[profiles.a]
auto_approve = [
  ["git", "fetch"],
  {exact = ["make", "lint"], cwd = "services/api"},
  {prefix = ["go", "test"], cwd = "services", cwd_subtree = true},
  {exact = ["true"]},
  {exact = ["true"], cwd = "."},
  {exact = ["git", "fetch"]},
]
[[profiles.b.auto_approve]]
exact = ["true"]
[[profiles.b.auto_approve]]
prefix = ["git", "status"]
cwd = "a/b"
`)
	a, _ := c.Profile("a")
	want := []Rule{
		{Match: MatchExact, Argv: []string{"git", "fetch"}},
		{Match: MatchPrefix, Argv: []string{"git", "fetch"}},
		{Match: MatchPrefix, Argv: []string{"go", "test"}, Cwd: "services", CwdSubtree: true},
		{Match: MatchExact, Argv: []string{"make", "lint"}, Cwd: "services/api"},
		{Match: MatchExact, Argv: []string{"true"}},
		{Match: MatchExact, Argv: []string{"true"}, Cwd: "."},
	}
	if !reflect.DeepEqual(a.AutoApprove, want) {
		t.Fatalf("rules\n got %v\nwant %v", a.AutoApprove, want)
	}
	b, _ := c.Profile("b")
	if len(b.AutoApprove) != 2 || b.AutoApprove[0].Cwd != "a/b" || b.AutoApprove[1].Match != MatchExact {
		t.Fatalf("array-of-tables rules: %v", b.AutoApprove)
	}
	// The canonical form carries every field and round-trips.
	p, err := FromCanonical(a.Canonical())
	if err != nil || !reflect.DeepEqual(p.AutoApprove, want) || p.Fingerprint() != a.Fingerprint() {
		t.Fatalf("canonical round trip: %v %v", err, p)
	}
	if !strings.Contains(string(a.Canonical()), `{"match":"exact","argv":["make","lint"],"cwd":"services/api"}`) {
		t.Errorf("canonical rules: %s", a.Canonical())
	}
	// The kind, the cwd and the subtree flag are all part of the fingerprint.
	fp := func(rule string) string {
		c := mustParse(t, "[profiles.x]\nauto_approve = ["+rule+"]\n")
		p, _ := c.Profile("x")
		return p.Fingerprint()
	}
	seen := map[string]string{}
	for _, r := range []string{`{exact = ["true"]}`, `{prefix = ["true"]}`, `{exact = ["true"], cwd = "a"}`, `{exact = ["true"], cwd = "a", cwd_subtree = true}`} {
		f := fp(r)
		if prev, dup := seen[f]; dup {
			t.Errorf("%s and %s have the same fingerprint", r, prev)
		}
		seen[f] = r
	}
	if fp(`["true"]`) != fp(`{prefix = ["true"]}`) {
		t.Error("the bare-array shorthand is not the prefix rule")
	}
}

func TestRuleErrors(t *testing.T) {
	es := expectErrors(t, `[profiles.a]
auto_approve = [
  {exact = ["git", "status"], prefix = ["git"]},
  {cwd = "src"},
  {exact = ["true"], cwd = "../x"},
  {exact = ["true"], cwd = "/workspace/src"},
  {exact = ["true"], cwd = "/etc"},
  {exact = ["true"], cwd = "src/"},
  {exact = ["true"], cwd = ""},
  {exact = ["true"], cwd_subtree = true},
  {exact = ["sh", "-c", "make"]},
  {exact = ["env", "bash"]},
  {exact = []},
  {exact = ["true"], where = "x"},
  "git",
  {exact = ["true"], cwd = "a"},
  {exact = ["true"], cwd = "a"},
  {exact = ["true"], cwd_subtree = "yes", cwd = "b"},
]
`,
		at{3, "auto_approve[0].prefix: a rule has either exact or prefix"},
		at{4, "auto_approve[1]: a rule needs exact = "},
		at{5, `auto_approve[2].cwd: cwd "../x" leaves the workspace`},
		at{6, `it is relative to /workspace; write "src"`},
		at{7, `cwd "/etc" is absolute`},
		at{8, `cwd "src/" is not a clean path: write "src"`},
		at{9, `cwd is empty: write "."`},
		at{10, "auto_approve[7].cwd_subtree: cwd_subtree needs cwd"},
		at{11, "auto_approve[8].exact[0]: sh is a shell or command runner"},
		at{12, "env is a shell or command runner"},
		at{13, "auto_approve[10].exact: an empty rule would approve every command"},
		at{14, `auto_approve[11].where: unknown key "where"`},
		at{15, "auto_approve[12]: a rule must be a table"},
		at{17, "is listed twice"},
		at{18, "auto_approve[15].cwd_subtree: must be true or false"},
	)
	for _, e := range es {
		if !strings.Contains(e.Key, "profiles.a.auto_approve[") {
			t.Errorf("error does not name the profile and rule index: %q", e.Error())
		}
	}
}

func TestImageReferences(t *testing.T) {
	expectErrors(t, `[profiles.a]
image = "ubuntu"
[profiles.b]
image = "oci:relative/dir:latest"
[profiles.c]
image = "docker://"
`,
		at{2, `unknown image "ubuntu"`},
		at{4, "oci: layout path must be absolute"},
		at{6, "give a registry reference"},
	)
	c := mustParse(t, "[profiles.a]\nimage = \"oci:/srv/img:v1\"\n[profiles.b]\nimage = \"docker://docker.io/library/debian:12\"\n")
	a, _ := c.Profile("a")
	if ref, layout, builtin := a.ImageRef("/d"); ref != "oci:/srv/img:v1" || layout != "" || builtin {
		t.Fatal(ref, layout, builtin)
	}
	d, _ := c.Profile("default")
	if ref, layout, builtin := d.ImageRef("/d"); ref != "oci:/d/lazaret/images/debian:latest" || layout != "/d/lazaret/images/debian" || !builtin {
		t.Fatal(ref, layout, builtin)
	}
}

func TestTypeErrorsAndSyntax(t *testing.T) {
	expectErrors(t, "[profiles.a]\nignored_path_isolation = \"no\"\nvolumes = \"x\"\nnetwork = 3\n",
		at{2, "must be true or false, not a string"},
		at{3, "must be an array of tables"},
		at{4, "must be a table, not an integer"},
	)
	expectErrors(t, "[profiles.a\nimage = 1\n", at{1, "fix the TOML syntax"})
	expectErrors(t, "[defaults]\ndescription = \"x\"\n", at{2, "move it into a [profiles.NAME] table"})
}

func TestEveryErrorListed(t *testing.T) {
	_, err := parse(t, "[profiles.a]\nimage = 1\n[profiles.b]\nimage = 2\n[profiles.c]\nimage = 3\n")
	es, _ := AsErrors(err)
	if len(es) != 3 || es[0].Line != 2 || es[1].Line != 4 || es[2].Line != 6 {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(err.Error(), "3 problems") {
		t.Fatalf("%v", err)
	}
}

func TestFingerprintStableAcrossFormatting(t *testing.T) {
	a := mustParse(t, sample)
	reordered := `
[profiles.tiny]
share_editor_config = true # comment

[[profiles.coder.volumes]]
mode = "rw"
target = "/root/.cache/go-build"
source = "/home/dev/.cache/go-build"

[profiles.coder]
auto_approve = [ ["go","test","./..."], ["git","fetch"] ]
env.EDITOR = "nano"
env.CLAUDE_CONFIG_DIR = "/root/.coder"
ignored_path_isolation = false
persistent_paths = ["/root/.npm", "/root/.coder"]
image = "debian"
description = "a different description is not fingerprinted"
network.allow = ["10.1.2.0/24"]

[defaults]
env = { EDITOR = "vi" }
network = { dns = ["1.1.1.1"], deny = ["203.0.113.0/24"] }
persistent_paths = ["/root/.cache"]
`
	b := mustParse(t, reordered)
	for _, n := range a.Names() {
		pa, _ := a.Profile(n)
		pb, _ := b.Profile(n)
		if pa.Fingerprint() != pb.Fingerprint() {
			t.Errorf("%s: fingerprints differ:\n%s\n%s", n, pa.Canonical(), pb.Canonical())
		}
		if d := Diff(pa, pb); len(d) != 0 {
			t.Errorf("%s: diff %v", n, d)
		}
	}
	// The built-in defaults are fingerprinted: the no-file default profile
	// equals a file that restates them.
	d1, _ := Builtin().Profile("default")
	d2, _ := mustParse(t, "[profiles.default]\nimage = \"debian\"\nignored_path_isolation = true\nignored_binds = true\n[profiles.default.network]\ndeny = [\"10.0.0.0/8\"]\n").Profile("default")
	if d1.Fingerprint() != d2.Fingerprint() {
		t.Error("restating defaults changed the fingerprint")
	}
	if !strings.HasPrefix(d1.Fingerprint(), "sha256:") || len(d1.Fingerprint()) != 7+64 {
		t.Errorf("form %q", d1.Fingerprint())
	}
}

func TestFingerprintChangesAndDiff(t *testing.T) {
	base := mustParse(t, sample)
	bp, _ := base.Profile("coder")
	cases := []struct {
		name, from, to, want string
	}{
		{"image", `image = "debian"`, `image = "busybox"`, `image: "debian" → "busybox"`},
		{"allow", `allow = ["10.1.2.0/24"]`, `allow = ["10.1.3.0/24"]`, "network.allow: added 10.1.3.0/24; removed 10.1.2.0/24"},
		{"env value", `EDITOR = "nano"`, `EDITOR = "ed"`, "env: value changed for EDITOR"},
		{"env name", `EDITOR = "nano" }`, `EDITOR = "nano", SECRET = "s3cr3t" }`, "env: added SECRET"},
		{"isolation", "ignored_path_isolation = false", "ignored_path_isolation = true", "ignored_path_isolation: false → true"},
		{"binds", "ignored_path_isolation = false", "ignored_path_isolation = false\nignored_binds = false", "ignored_binds: true → false"},
		{"rule", `["git", "fetch"], `, "", `auto_approve: removed prefix ["git" "fetch"]`},
		{"volume mode", `mode = "rw"`, `mode = "ro"`, "volumes: added /home/dev/.cache/go-build:/root/.cache/go-build:ro; removed /home/dev/.cache/go-build:/root/.cache/go-build:rw"},
		{"persistent", `"/root/.npm"]`, `"/root/.npm", "/srv/x"]`, "persistent_paths: added /srv/x"},
		{"dns", `dns = ["1.1.1.1"]`, `dns = ["9.9.9.9"]`, "network.dns: added 9.9.9.9; removed 1.1.1.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(sample, c.from, c.to, 1)
			if src == sample {
				t.Fatalf("replacement %q did not apply", c.from)
			}
			p, _ := mustParse(t, src).Profile("coder")
			if p.Fingerprint() == bp.Fingerprint() {
				t.Fatal("fingerprint unchanged")
			}
			d := strings.Join(Diff(bp, p), "\n")
			if !strings.Contains(d, c.want) {
				t.Fatalf("diff %q lacks %q", d, c.want)
			}
			if strings.Contains(d, "s3cr3t") || strings.Contains(d, "nano") {
				t.Fatalf("diff leaks an env value: %q", d)
			}
			err := MismatchError(bp, p, MismatchRemedy("lazaret stop -p coder", 0, 0, WithSessions))
			if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), c.want) || !strings.HasSuffix(err.Error(), "Wait for its sessions to end (the Domain then stops) or undo the change; `lazaret stop -p coder` ends the Domain and its sessions now") {
				t.Fatalf("mismatch error %v", err)
			}
		})
	}
}

func TestCanonicalRoundTrip(t *testing.T) {
	c := mustParse(t, sample)
	for _, p := range c.Profiles() {
		q, err := FromCanonical(p.Canonical())
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if q.Fingerprint() != p.Fingerprint() || FingerprintOf(p.Canonical()) != p.Fingerprint() {
			t.Fatalf("%s: round trip changed fingerprint", p.Name)
		}
		if len(Diff(p, q)) != 0 {
			t.Fatalf("%s: diff after round trip %v", p.Name, Diff(p, q))
		}
	}
	p, _ := c.Profile("coder")
	b := p.Canonical()
	// Non-canonical (reordered list) and unknown fields are refused.
	bad := strings.Replace(string(b), `["/etc","/home","/opt","/root","/usr","/var/lib"]`, `["/home","/etc","/opt","/root","/usr","/var/lib"]`, 1)
	if bad == string(b) {
		t.Fatalf("test setup: %s", b)
	}
	if _, err := FromCanonical([]byte(bad)); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("non-canonical accepted: %v", err)
	}
	if _, err := FromCanonical([]byte(strings.Replace(string(b), `{"version":3,`, `{"version":3,"x":1,`, 1))); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("unknown field accepted: %v", err)
	}
	if _, err := FromCanonical([]byte(strings.Replace(string(b), `{"version":3,`, `{"version":4,`, 1))); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("version 3 accepted: %v", err)
	}
}

func TestSplitHalves(t *testing.T) {
	for _, c := range []struct{ in, lo, hi string }{
		{"10.0.0.0/8", "10.0.0.0/9", "10.128.0.0/9"},
		{"172.16.0.0/12", "172.16.0.0/13", "172.24.0.0/13"},
		{"192.168.0.0/16", "192.168.0.0/17", "192.168.128.0/17"},
		{"1.2.3.4/31", "1.2.3.4/32", "1.2.3.5/32"},
	} {
		lo, hi := split(netip.MustParsePrefix(c.in))
		if lo.String() != c.lo || hi.String() != c.hi {
			t.Errorf("%s: %s %s", c.in, lo, hi)
		}
	}
}

func TestDefaultPathAndLoad(t *testing.T) {
	env := map[string]string{"HOME": "/home/dev"}
	getenv := func(k string) string { return env[k] }
	if p, _ := DefaultPath(getenv); p != "/home/dev/.config/lazaret/config.toml" {
		t.Fatal(p)
	}
	env["XDG_CONFIG_HOME"] = "/xdg"
	if p, _ := DefaultPath(getenv); p != "/xdg/lazaret/config.toml" {
		t.Fatal(p)
	}
	env["XDG_CONFIG_HOME"] = "relative" // ignored, as the XDG spec says
	if p, _ := DefaultPath(getenv); p != "/home/dev/.config/lazaret/config.toml" {
		t.Fatal(p)
	}
	if _, err := DefaultPath(func(string) string { return "" }); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatal(err)
	}

	dir := t.TempDir()
	env = map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "cfg")}
	c, err := Load("", getenv)
	if err != nil || c.Path != "" || len(c.Names()) != len(builtinProfiles) {
		t.Fatalf("missing default file: %v %+v", err, c)
	}
	if _, err := Load(filepath.Join(dir, "nope.toml"), getenv); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("missing explicit file: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "cfg", "lazaret"), 0o700)
	f := filepath.Join(dir, "cfg", "lazaret", "config.toml")
	os.WriteFile(f, []byte("[profiles.x]\n[[profiles.x.volumes]]\nsource = \"~/data\"\ntarget = \"/data\"\n"), 0o600)
	c, err = Load("", getenv)
	if err != nil || c.Path != f {
		t.Fatalf("load: %v", err)
	}
	x, _ := c.Profile("x")
	if x.Volumes[0].Source != filepath.Join(dir, "data") {
		t.Fatal(x.Volumes)
	}
	os.WriteFile(f, []byte("[profiles.x]\nimage = 1\n"), 0o600)
	if _, err = Load("", getenv); err == nil || !strings.HasPrefix(strings.TrimPrefix(err.Error(), "invalid configuration: "), f+":2:") {
		t.Fatalf("error position: %v", err)
	}
	os.Chmod(f, 0o622)
	if _, err = Load(f, getenv); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("group-writable accepted: %v", err)
	}
	os.Chmod(f, 0o600)
	os.WriteFile(f, make([]byte, MaxFileSize+1), 0o600)
	if _, err = Load(f, getenv); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("oversized accepted: %v", err)
	}
	if _, err = Load(dir, getenv); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("directory accepted: %v", err)
	}
}

func TestEmptyFileIsBuiltins(t *testing.T) {
	c := mustParse(t, "# nothing\n")
	d, _ := c.Profile("default")
	b, _ := Builtin().Profile("default")
	if d.Fingerprint() != b.Fingerprint() {
		t.Fatal("empty file differs from built-ins")
	}
}

// TestDocExamplesParse keeps docs/CONFIG.md's TOML examples valid.
func TestDocExamplesParse(t *testing.T) {
	b, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "```toml\n")[1:]
	if len(blocks) < 4 {
		t.Fatalf("found %d toml blocks", len(blocks))
	}
	for i, blk := range blocks {
		src, _, _ := strings.Cut(blk, "```")
		if strings.Contains(src, "...") {
			continue // the structure sketch
		}
		if !strings.Contains(src, "[") || strings.HasPrefix(src, "auto_approve") {
			src = "[profiles.x]\n" + src
		}
		if _, err := parse(t, src); err != nil {
			t.Errorf("block %d:\n%s\n%v", i, src, err)
		}
	}
	c := mustParse(t, strings.Split(blocks[len(blocks)-1], "```")[0])
	if p, err := c.Profile("aider"); err != nil || p.Recipe == nil || p.Recipe.Base != "debian" || len(p.Command) != 1 {
		t.Fatal(err)
	}
}

func TestAllowHosts(t *testing.T) {
	c, err := Parse("config.toml", []byte("[profiles.web]\nnetwork.allow_hosts = [\"API.Example.com.\", \"git.example.org\"]\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Profile("web")
	if strings.Join(p.Network.AllowHosts, ",") != "api.example.com,git.example.org" {
		t.Fatalf("allow_hosts %v", p.Network.AllowHosts)
	}
	q, err := FromCanonical(p.Canonical())
	if err != nil || q.Fingerprint() != p.Fingerprint() {
		t.Fatalf("round trip: %v", err)
	}
	base, _ := c.Profile("default")
	if d := Diff(base, p); !strings.Contains(strings.Join(d, "\n"), "network.allow_hosts: added api.example.com") {
		t.Errorf("diff %v", d)
	}
	for in, want := range map[string]string{
		`["10.1.2.3"]`:        "put it in network.allow as 10.1.2.3/32",
		`["*.example.com"]`:   "needs network.mode = \"allowlist\"",
		`["localhost"]`:       "not a fully qualified host name",
		`["a_b.example.com"]`: "not a valid host name",
		`["x.com", "X.com"]`:  "listed twice",
		`["-a.example.com"]`:  "not a valid host name",
	} {
		_, err := Parse("config.toml", []byte("[profiles.web]\nnetwork.allow_hosts = "+in+"\n"), Options{})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "config.toml:2") {
			t.Errorf("%s: %v, want %q with the line", in, err, want)
		}
	}
}

// TestSessionUser: root by default; user = "agent" gets uid 1000 unless
// user_id says otherwise; bad names and a user_id for root are refused;
// the user is part of the fingerprint (a root profile keeps its old one).
func TestSessionUser(t *testing.T) {
	c := mustParse(t, "[profiles.a]\nuser = \"agent\"\n[profiles.b]\nuser = \"dev\"\nuser_id = 1234\n[profiles.r]\n")
	for name, want := range map[string]GuestUser{
		"a":       {Name: "agent", UID: 1000, GID: 1000, Home: "/home/agent"},
		"b":       {Name: "dev", UID: 1234, GID: 1234, Home: "/home/dev"},
		"r":       {Name: "root", Home: "/root"},
		"default": {Name: "root", Home: "/root"},
	} {
		p, err := c.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.SessionUser(); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	a, _ := c.Profile("a")
	r, _ := c.Profile("r")
	back, err := FromCanonical(a.Canonical())
	if err != nil || back.SessionUser() != a.SessionUser() {
		t.Errorf("canonical round trip: %+v, %v", back, err)
	}
	if strings.Contains(string(r.Canonical()), "user") {
		t.Errorf("a root profile's canonical form names a user: %s", r.Canonical())
	}
	for src, want := range map[string]string{
		"[profiles.x]\nuser = \"Agent!\"\n":             "is not a user name",
		"[profiles.x]\nuser = \"nobody\"\n":             "nobody cannot be",
		"[profiles.x]\nuser_id = 1000\n":                "user_id only applies to a non-root user",
		"[profiles.x]\nuser = \"a\"\nuser_id = 0\n":     "whole number from 1 to 65533",
		"[profiles.x]\nuser = \"a\"\nuser_id = 65534\n": "whole number from 1 to 65533",
	} {
		if _, err := parse(t, src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

func TestParseLinger(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "0s": 0, "90s": 90 * time.Second, "10m": 10 * time.Minute, " 1h30m ": 90 * time.Minute, "24h": 24 * time.Hour} {
		if got, msg := ParseLinger(in); msg != "" || got != want {
			t.Errorf("ParseLinger(%q) = %v, %q; want %v", in, got, msg, want)
		}
	}
	for in, wantMsg := range map[string]string{"soon": "is not a duration", "10": "is not a duration", "-1m": "from 0 to 24h0m0s", "25h": "from 0 to 24h0m0s", "": "is not a duration"} {
		if _, msg := ParseLinger(in); !strings.Contains(msg, wantMsg) {
			t.Errorf("ParseLinger(%q) message %q, want it to contain %q", in, msg, wantMsg)
		}
	}
}

func TestHostCA(t *testing.T) {
	bundle := "/etc/ssl/certs/ca-certificates.crt"
	c, err := Parse("c.toml", []byte(`
[profiles.mine]
image = "busybox"
[profiles.ca]
image = "busybox"
host_ca = true
env.SSL_CERT_FILE = "/etc/mine.pem"
[profiles.clash]
image = "busybox"
host_ca = true
`), Options{HostCABundle: bundle})
	if err != nil {
		t.Fatal(err)
	}
	hasVolume := func(p *Profile) bool {
		for _, v := range p.Volumes {
			if v.Target == HostCAGuestPath && v.Source == bundle && v.ReadOnly {
				return true
			}
		}
		return false
	}
	for _, name := range []string{"claude", "codex", "node", "ca"} {
		p, _ := c.Profile(name)
		if !p.HostCA || !hasVolume(p) || p.Env["NODE_EXTRA_CA_CERTS"] != HostCAGuestPath || p.Env["GIT_SSL_CAINFO"] != HostCAGuestPath {
			t.Errorf("%s: host_ca %v, volumes %v, env %v", name, p.HostCA, p.Volumes, p.Env)
		}
	}
	if p, _ := c.Profile("ca"); p.Env["SSL_CERT_FILE"] != "/etc/mine.pem" {
		t.Errorf("host_ca replaced the profile's own SSL_CERT_FILE: %v", p.Env)
	}
	for _, name := range []string{"mine", "default", "tiny"} {
		p, _ := c.Profile(name)
		if p.HostCA || hasVolume(p) || p.Env["SSL_CERT_FILE"] != "" {
			t.Errorf("%s got the host CA without host_ca: %v %v", name, p.Volumes, p.Env)
		}
	}
	// Without a bundle on the host, nothing is added (and the fingerprint
	// is the one without it).
	none, err := Parse("c.toml", []byte("[profiles.ca]\nimage = \"busybox\"\nhost_ca = true\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := none.Profile("ca"); len(p.Volumes) != 0 || len(p.Env) != 0 {
		t.Errorf("no bundle, yet %v %v", p.Volumes, p.Env)
	}
	// The bundle's target is reserved.
	_, err = Parse("c.toml", []byte(`
[profiles.clash]
image = "busybox"
host_ca = true
volumes = [{ source = "/srv/x.pem", target = "/run/lazaret-host-ca.crt", mode = "ro" }]
`), Options{HostCABundle: bundle})
	if err == nil || !strings.Contains(err.Error(), "host_ca") {
		t.Errorf("a volume at the CA target: %v", err)
	}
}

// TestNetworkAllowlistMode: mode, wildcards and ports, presets and ask
// parse in the allowlist mode, are refused in the deny mode with the key
// to set, and join the fingerprint (a deny-mode profile keeps its own).
func TestNetworkAllowlistMode(t *testing.T) {
	c := mustParse(t, "[profiles.a]\nnetwork.mode = \"allowlist\"\nnetwork.allow_hosts = [\"api.example.com\", \"*.CDN.example.com\", \"git.example.com:22\"]\nnetwork.allow_presets = [\"npm\"]\nnetwork.ask = true\n[profiles.d]\n")
	a, _ := c.Profile("a")
	if a.Network.Mode != ModeAllowlist || !a.Network.Ask || strings.Join(a.Network.AllowHosts, ",") != "*.cdn.example.com,api.example.com,git.example.com:22" || strings.Join(a.Network.AllowPresets, ",") != "npm" {
		t.Fatalf("network %+v", a.Network)
	}
	var rules []string
	for _, r := range a.Network.HostRules("a") {
		rules = append(rules, r.Rule.String())
	}
	if !strings.Contains(strings.Join(rules, " "), "registry.npmjs.org") || !strings.Contains(strings.Join(rules, " "), "git.example.com:22") {
		t.Errorf("host rules %v", rules)
	}
	q, err := FromCanonical(a.Canonical())
	if err != nil || q.Fingerprint() != a.Fingerprint() || q.Network.Mode != ModeAllowlist {
		t.Fatalf("round trip: %v %+v", err, q)
	}
	d, _ := c.Profile("d")
	if d.Network.Mode != ModeDeny || strings.Contains(string(d.Canonical()), "network_mode") {
		t.Errorf("deny mode profile: %+v %s", d.Network, d.Canonical())
	}
	// The built-in agent profiles use the allowlist mode with presets; a
	// profile may go back to the deny mode.
	cl, _ := c.Profile("claude")
	if cl.Network.Mode != ModeAllowlist || !strings.Contains(strings.Join(cl.Network.AllowPresets, ","), "anthropic") {
		t.Errorf("built-in claude network %+v", cl.Network)
	}
	back := mustParse(t, "[profiles.claude]\nnetwork.mode = \"deny\"\n")
	if cb, _ := back.Profile("claude"); cb.Network.Mode != ModeDeny || len(cb.Network.AllowPresets) != 0 {
		t.Errorf("claude in the deny mode: %+v", cb.Network)
	}
	for in, want := range map[string]string{
		"network.mode = \"open\"":                                           "is not a network mode",
		"network.allow_presets = [\"npm\"]":                                 "needs network.mode = \"allowlist\"",
		"network.ask = true":                                                "needs network.mode = \"allowlist\"",
		"network.mode = \"allowlist\"\nnetwork.allow_presets = [\"x\"]":     "is not a preset",
		"network.mode = \"allowlist\"\nnetwork.allow_hosts = [\"*\"]":       "would allow every host",
		"network.mode = \"allowlist\"\nnetwork.allow_hosts = [\"*.com\"]":   "too broad",
		"network.mode = \"allowlist\"\nnetwork.allow_hosts = [\"a.*.com\"]": "may only be a leading",
		"network.mode = \"allowlist\"\nnetwork.allow_hosts = [\"a.com:0\"]": "not a number from 1 to 65535",
		"network.allow_hosts = [\"a.com:443\"]":                             "needs network.mode = \"allowlist\"",
	} {
		_, err := Parse("config.toml", []byte("[profiles.web]\n"+in+"\n"), Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

// TestMismatchRemedy: the refusal's last sentence follows the Domain's
// state — a lingering Domain (no session) is stopped or the change undone;
// one with sessions, or starting for a run, is waited for (and then its
// linger), and a stop is named as ending those sessions too.
func TestMismatchRemedy(t *testing.T) {
	for _, c := range []struct {
		linger, left time.Duration
		what         DomainActivity
		want         string
	}{
		{0, 0, WithSessions, "Wait for its sessions to end (the Domain then stops) or undo the change; `lazaret stop -p lg` ends the Domain and its sessions now"},
		{10 * time.Minute, 0, WithSessions, "Wait for its sessions to end (the Domain then stops after lingering 10m0s) or undo the change; `lazaret stop -p lg` ends the Domain and its sessions now"},
		{10 * time.Minute, 9*time.Minute + 12400*time.Millisecond, Lingering, "It lingers with no session (9m12s left): `lazaret stop -p lg` ends it now, or undo the change"},
		{0, 0, Starting, "It is starting for another `lazaret run`: wait for that run to end (the Domain then stops) or undo the change; `lazaret stop -p lg` ends the Domain and the runs waiting for it now"},
	} {
		if got := MismatchRemedy("lazaret stop -p lg", c.linger, c.left, c.what); got != c.want {
			t.Errorf("MismatchRemedy(%s, %s, %v) = %q, want %q", c.linger, c.left, c.what, got, c.want)
		}
	}
}

// TestBuiltinNodeProfilesQuietTheProxyAgent: the profiles on the pinned
// Node.js keep its proxy agent's experimental warning out of the agent's
// terminal, also when the user's file amends their env; the others do not
// set NODE_OPTIONS (their Node, if any, is not Lazaret's to know).
func TestBuiltinNodeProfilesQuietTheProxyAgent(t *testing.T) {
	c := mustParse(t, "[profiles.claude]\nenv.EDITOR = \"nano\"\n")
	for _, name := range []string{"node", "claude", "codex"} {
		p, err := c.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Env["NODE_OPTIONS"] != "--disable-warning=UNDICI-EHPA" {
			t.Errorf("%s: NODE_OPTIONS %q", name, p.Env["NODE_OPTIONS"])
		}
	}
	if p, _ := c.Profile("claude"); p.Env["EDITOR"] != "nano" || p.Env["DISABLE_AUTOUPDATER"] != "1" {
		t.Errorf("amended claude env %v", p.Env)
	}
	for _, name := range []string{"default", "tiny"} {
		if p, _ := c.Profile(name); p.Env["NODE_OPTIONS"] != "" {
			t.Errorf("%s sets NODE_OPTIONS %q", name, p.Env["NODE_OPTIONS"])
		}
	}
}
