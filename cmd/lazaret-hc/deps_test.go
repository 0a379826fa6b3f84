package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoImageStack: the Host Coordinator (and the roles it hosts)
// links no image library. Everything it needs of the prepared lower (IDs,
// records, leases' tree probe) is in package prepared; image import and
// layer application (package prepare) stay in lazaret-rs, so the
// coordinator does not initialise the image stack at every start.
func TestLinksNoImageStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"go.podman.io/image/", "go.podman.io/storage", "github.com/opencontainers/image-spec",
		"github.com/lazaret/lazaret/pkg/prepare", "github.com/lazaret/lazaret/pkg/imagebuild",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed only %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
				t.Errorf("lazaret-hc links image-stack package %s (forbidden %s): move what it needs into pkg/prepared", d, f)
			}
		}
	}
}
