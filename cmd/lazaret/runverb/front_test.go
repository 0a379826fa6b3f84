package runverb

import (
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

// TestFrontStaysLean fails when the front binary links a package whose
// initialisation the run verb must not pay for (the reason the front and
// lazaret-cli are two binaries). go-fuse is the one exception: the front
// hosts the Git-routing daemon (its packages initialise in about 0.6 ms),
// which starts faster from here than from lazaret-hc, where its start
// delays every cold start.
func TestFrontStaysLean(t *testing.T) {
	tags := "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"
	heavy := []string{
		"github.com/cockroachdb/pebble", "go.podman.io/", "github.com/containers/", "github.com/docker/",
		"github.com/prometheus/", "github.com/getsentry/",
		"github.com/lazaret/lazaret/cmd/lazaret/cli", "github.com/lazaret/lazaret/pkg/store",
		"github.com/lazaret/lazaret/pkg/imagebuild", "github.com/lazaret/lazaret/pkg/prepare",
	}
	for _, v := range linkcheck.ForbiddenTagged(t, "github.com/lazaret/lazaret/cmd/lazaret", tags, heavy) {
		t.Errorf("the lazaret front links %s", v.Dep)
	}
}
