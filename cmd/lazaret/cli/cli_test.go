package cli

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestUnknownCommandIsUsageError: an unknown verb, at any depth, is a
// usage error (status 2, as the README says) that names the command that
// lacks it and, when one is near, the one meant — not urfave/cli's "No
// help topic" with the status of a Lazaret failure.
func TestUnknownCommandIsUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"statu"}, []string{"`lazaret` has no command \"statu\"", "did you mean `lazaret status`?"}},
		{[]string{"frobnicate"}, []string{"`lazaret` has no command \"frobnicate\" (`lazaret --help` lists them)"}},
		{[]string{"state", "ignored", "ls"}, []string{"`lazaret state ignored` has no command \"ls\"", "did you mean `lazaret state ignored list`?"}},
		{[]string{"image", "bild"}, []string{"did you mean `lazaret image build`?"}},
		{[]string{"help", "run"}, []string{"`lazaret --help` lists its commands and `lazaret COMMAND --help` explains one"}},
	} {
		code, msg := runCaptured(t, c.args...)
		if code != 2 {
			t.Errorf("lazaret %s: status %d, want 2 (%s)", strings.Join(c.args, " "), code, msg)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("lazaret %s: %q lacks %q", strings.Join(c.args, " "), msg, w)
			}
		}
		if strings.Contains(msg, "No help topic") {
			t.Errorf("lazaret %s: %q", strings.Join(c.args, " "), msg)
		}
	}
	// A name far from every command gets no guess.
	if got := nearestCommand(appCommands(), "zz"); got != "" {
		t.Errorf("nearestCommand(zz) = %q", got)
	}
}

// TestBadOptionIsUsageError: an unknown option or one missing its value,
// on any command, is a usage error (status 2) naming the command and the
// option meant when one is near, without the whole help text.
func TestBadOptionIsUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--jsn"}, "`lazaret status` has no option --jsn; did you mean --json? (`lazaret status --help` lists the options)"},
		{[]string{"logs", "--folow"}, "did you mean --follow?"},
		{[]string{"state", "ignored", "list", "-q"}, "`lazaret state ignored list` has no option -q"},
		{[]string{"stop", "-p"}, "`lazaret stop`: option -p needs a value"},
		{[]string{"--jsn"}, "`lazaret` has no option --jsn"},
	} {
		code, msg := runCaptured(t, c.args...)
		if code != 2 || !strings.Contains(msg, c.want) || strings.Contains(msg, "Incorrect Usage") || strings.Contains(msg, "USAGE:") {
			t.Errorf("lazaret %s: status %d, %q; want 2 and %q", strings.Join(c.args, " "), code, msg, c.want)
		}
	}
}

// TestStrayArgsRefused: every command that declares no arguments refuses
// one as a usage error before doing anything (it used to run as if the
// word were not there), and one with --profile and --dir says what names
// its Domain.
func TestStrayArgsRefused(t *testing.T) {
	rmEnv(t) // whatever a command that did run would touch is a temporary home
	var leaves [][]string
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string(nil), path...), c.Name)
			walk(p, c.Subcommands)
			if c.Action != nil && c.ArgsUsage == "" && len(c.Subcommands) == 0 {
				leaves = append(leaves, p)
			}
		}
	}
	walk(nil, appCommands())
	if len(leaves) < 10 {
		t.Fatalf("only %d commands without arguments: %v", len(leaves), leaves)
	}
	for _, p := range leaves {
		code, msg := runCaptured(t, append(p, "zz-stray")...)
		want := "`lazaret " + strings.Join(p, " ") + "` takes no arguments (got \"zz-stray\")"
		if code != 2 || !strings.Contains(msg, want) {
			t.Errorf("lazaret %s zz-stray: status %d, %q; want 2 and %q", strings.Join(p, " "), code, msg, want)
		}
	}
	for _, verb := range []string{"stop", "status"} {
		if _, msg := runCaptured(t, verb, "zz"); !strings.Contains(msg, "the Domain is that of -p PROFILE and -C DIR") {
			t.Errorf("%s: %q", verb, msg)
		}
	}
	if _, msg := runCaptured(t, "ls", "zz"); strings.Contains(msg, "-p PROFILE") {
		t.Errorf("ls names no Domain, but says: %q", msg)
	}
}

// TestVersionOption: `lazaret --version` (and -V) is `lazaret version`
// (which, run from this test binary, finds no Lazaret binaries beside it
// and says so).
func TestVersionOption(t *testing.T) {
	_, want := runCaptured(t, "version")
	for _, opt := range []string{"--version", "-V"} {
		if _, msg := runCaptured(t, opt); msg != want || strings.Contains(msg, "no option") {
			t.Errorf("lazaret %s: %q, want what `lazaret version` says: %q", opt, msg, want)
		}
	}
}
