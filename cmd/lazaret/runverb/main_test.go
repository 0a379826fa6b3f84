package runverb

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// envFrontTest makes the test binary run the front's Main (TestHandOver).
const envFrontTest = "RUNVERB_TEST_FRONT"

func TestMain(m *testing.M) {
	if os.Getenv(envFrontTest) == "1" {
		os.Exit(Main(append([]string{"lazaret"}, os.Args[1:]...)))
	}
	os.Exit(m.Run())
}

// TestHandOver runs the front (this test binary) with a stand-in full CLI:
// every command line but run is handed over by exec, with its arguments
// and the front named in LAZARET_FRONT; run's help stays in the front; a
// missing full CLI is Lazaret's failure (125).
func TestHandOver(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "lazaret-cli")
	if err := os.WriteFile(full, []byte("#!/bin/sh\necho \"full: $* front=$LAZARET_FRONT\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	front := func(cli string, args ...string) (string, int) {
		c := exec.Command(self, args...)
		c.Env = append(os.Environ(), envFrontTest+"=1", "LAZARET_CLI="+cli)
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	for _, args := range [][]string{{"status", "--json"}, {"--help"}, {"run", "--generate-bash-completion"}} {
		out, code := front(full, args...)
		if want := "full: " + strings.Join(args, " ") + " front=" + self + "\n"; code != 0 || out != want {
			t.Errorf("front %q: exit %d %q, want %q", args, code, out, want)
		}
	}
	if out, code := front(full, "run", "--help"); code != 0 || strings.Contains(out, "full:") || !strings.Contains(out, "lazaret run") {
		t.Errorf("front run --help: exit %d %q, want the run verb's help from the front", code, out)
	}
	if out, code := front(filepath.Join(dir, "missing"), "status"); code != ExitLazaret || !strings.Contains(out, "LAZARET_CLI") {
		t.Errorf("front status without the full CLI: exit %d %q", code, out)
	}
}

// TestLostCoordinatorNamesTheWayOn: a session whose coordinator went away
// says what became of the Domain and the logs command to type, with -C
// (quoted) only when the run named its workspace with -C.
func TestLostCoordinatorNamesTheWayOn(t *testing.T) {
	cause := errdefs.Mark(errors.New("lost the connection to the Host Coordinator: EOF"), errdefs.ErrUnavailable)
	err := lostCoordinator(cause, "tiny", "", "/src/app", t.TempDir())
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("the category is lost: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"lost the connection to the Host Coordinator: EOF", "the next `lazaret run` here recovers the Domain", "`lazaret logs -p tiny`"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	msg = lostCoordinator(cause, "tiny", "../my app", "/src/my app", t.TempDir()).Error()
	if !strings.Contains(msg, "`lazaret logs -p tiny -C '/src/my app'`") {
		t.Errorf("a run with -C: the logs command should name the workspace: %s", msg)
	}
}
