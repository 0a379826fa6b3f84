package runverb

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/linkcheck"
)

func TestIsRun(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"lazaret", "run", "--", "true"}, true},
		{[]string{"lazaret", "run"}, true},
		{[]string{"lazaret", "run", "--help"}, true},
		{[]string{"lazaret"}, false},
		{[]string{"lazaret", "status"}, false},
		{[]string{"lazaret", "--help", "run"}, false},
		{[]string{"lazaret", "run", "--generate-bash-completion"}, false},
		{[]string{"lazaret", "runx"}, false},
	} {
		if got := IsRun(c.args); got != c.want {
			t.Errorf("IsRun(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestFrontStaysLean fails when the front binary, built with the tags the
// Makefile builds it with, links a package whose initialisation the run
// verb must not pay for (the reason the front and lazaret-cli are two
// binaries): the Domain Store, the image stack, and urfave/cli's man page
// and Markdown renderer, which the Makefile's FRONT_TAGS leave out.
func TestFrontStaysLean(t *testing.T) {
	heavy := []string{
		"github.com/cockroachdb/pebble", "go.podman.io/", "github.com/containers/", "github.com/docker/",
		"github.com/prometheus/", "github.com/getsentry/",
		"github.com/russross/blackfriday", "github.com/cpuguy83/go-md2man",
		"github.com/lazaret/lazaret/cmd/lazaret/cli", "github.com/lazaret/lazaret/pkg/store",
		"github.com/lazaret/lazaret/pkg/imagebuild", "github.com/lazaret/lazaret/pkg/prepare",
	}
	tags := makeVariable(t, "TAGS") + " " + makeVariable(t, "FRONT_TAGS")
	for _, v := range linkcheck.ForbiddenTagged(t, "github.com/lazaret/lazaret/cmd/lazaret", tags, heavy) {
		t.Errorf("the lazaret front links %s", v.Dep)
	}
}

// makeVariable is the value of a simple `NAME := value` line of the
// repository's Makefile.
func makeVariable(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+" := "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("the Makefile defines no %s", name)
	return ""
}
