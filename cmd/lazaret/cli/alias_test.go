package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/shellquote"
)

func TestAliasFunctions(t *testing.T) {
	as := []profileAlias{{"claude", "claude"}, {"codex", "codex-cli"}}
	var b bytes.Buffer
	if err := writeAliases(&b, "bash", "command lazaret run", as); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`claude() { command lazaret run --profile claude -- claude "$@"; }`,
		`codex() { command lazaret run --profile codex -- codex-cli "$@"; }`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("bash output lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := writeAliases(&b, "fish", "command lazaret run", as[:1]); err != nil {
		t.Fatal(err)
	}
	if want := "function claude --description 'run claude in the Lazaret profile claude'\n    command lazaret run --profile claude -- claude $argv\nend\n"; !strings.Contains(b.String(), want) {
		t.Errorf("fish output:\n%s\nwant:\n%s", b.String(), want)
	}
	if err := writeAliases(&b, "tcsh", "lazaret", as); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--shell bash, zsh or fish") {
		t.Errorf("tcsh: %v", err)
	}
}

func TestAliasSpecs(t *testing.T) {
	for spec, want := range map[string]profileAlias{"claude": {"claude", "claude"}, "codex=codex-cli": {"codex", "codex-cli"}, "a.b=/opt/x/bin/y": {"a.b", "/opt/x/bin/y"}} {
		got, err := parseAliasSpec(spec)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", spec, got, err)
		}
	}
	for _, bad := range []string{"Claude", "x=$(rm -rf ~)", "x=a b", "x=./rel", "-x", "x="} {
		if _, err := parseAliasSpec(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q accepted (%v)", bad, err)
		}
	}
	if shellFromEnv("/usr/bin/fish") != "fish" || shellFromEnv("/bin/zsh") != "zsh" || shellFromEnv("") != "bash" {
		t.Error("shellFromEnv")
	}
	if shellquote.Word("/opt/it's/lazaret") != `'/opt/it'\''s/lazaret'` || shellquote.Word("/usr/bin/lazaret") != "/usr/bin/lazaret" {
		t.Error("shellQuote")
	}
}

// TestEveryCommandHasExamples: each visible command's --help shows examples.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(path string, cs []*cli.Command)
	walk = func(path string, cs []*cli.Command) {
		for _, c := range cs {
			if c.Hidden {
				continue
			}
			if len(c.Subcommands) > 0 {
				walk(path+c.Name+" ", c.Subcommands)
				continue
			}
			if !strings.Contains(c.Description, "Examples:\n") || !strings.Contains(c.Description, "lazaret "+path+c.Name) {
				t.Errorf("lazaret %s%s --help has no examples of itself", path, c.Name)
			}
		}
	}
	walk("", appCommands())
}
