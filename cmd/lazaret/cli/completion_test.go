package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func testApp(w io.Writer) *cli.App {
	return &cli.App{Name: "lazaret", Commands: appCommands(), Writer: w, ErrWriter: w, EnableBashCompletion: true, HideHelpCommand: true, ExitErrHandler: func(*cli.Context, error) {}}
}

// Every command's flags parse (no flag defined twice) and its help prints.
func TestEveryCommandHelp(t *testing.T) {
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue // urfave/cli's own, added to every command it runs
			}
			args := append(append([]string{"lazaret"}, prefix...), c.Name, "--help")
			var out bytes.Buffer
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%v: %v", args, r)
					}
				}()
				if err := testApp(&out).Run(args); err != nil {
					t.Errorf("%v: %v", args, err)
				}
			}()
			if !strings.Contains(out.String(), c.Name) {
				t.Errorf("%v printed %q", args, out.String())
			}
			walk(append(append([]string{}, prefix...), c.Name), c.Subcommands)
		}
	}
	walk(nil, appCommands())
}

// The completions and the manual page are generated from the command tree
// (bash's and zsh's scripts ask lazaret itself): the lifecycle commands
// and their flags are in them.
func TestCompletionAndManCoverLifecycleCommands(t *testing.T) {
	app := testApp(io.Discard)
	fish, err := app.ToFishCompletion()
	if err != nil {
		t.Fatal(err)
	}
	man, err := app.ToManWithSection(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"stop", "logs", "ls", "cp", "import"} {
		if !strings.Contains(fish, "-a '"+cmd+"'") {
			t.Errorf("fish completion lacks %s", cmd)
		}
		if !strings.Contains(man, cmd) {
			t.Errorf("man page lacks %s", cmd)
		}
	}
	for _, flag := range []string{"older-than", "follow", "generation", "force"} {
		if !strings.Contains(fish, "-l "+flag) {
			t.Errorf("fish completion lacks --%s", flag)
		}
	}
}
