package runverb

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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

// TestFrontStaysLean fails when the front binary links a package whose
// initialisation the run verb must not pay for (the reason the front and
// lazaret-cli are two binaries). go-fuse is the one exception: the front
// hosts the Git-routing daemon (its packages initialise in about 0.6 ms),
// which starts faster from here than from lazaret-hc, where its start
// delays every cold start.
func TestFrontStaysLean(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	tags := "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"
	out, err := exec.Command(goBin, "list", "-tags", tags, "-deps", "github.com/lazaret/lazaret/cmd/lazaret").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	heavy := []string{
		"github.com/cockroachdb/pebble", "go.podman.io/", "github.com/containers/", "github.com/docker/",
		"github.com/prometheus/", "github.com/getsentry/",
		"github.com/lazaret/lazaret/cmd/lazaret/cli", "github.com/lazaret/lazaret/pkg/store",
		"github.com/lazaret/lazaret/pkg/imagebuild", "github.com/lazaret/lazaret/pkg/prepare",
	}
	for _, p := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if strings.HasPrefix(p, h) {
				t.Errorf("the lazaret front links %s", p)
			}
		}
	}
}
