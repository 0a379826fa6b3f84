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
