package cli

import (
	"strings"
	"testing"
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
