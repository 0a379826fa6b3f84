package main

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/linkcheck"
)

// TestLinksNoImageStack: the Host Coordinator (and the roles it hosts)
// links no image library. Everything it needs of the prepared lower (IDs,
// records, leases' tree probe) is in package prepared; image import and
// layer application (package prepare) stay in lazaret-rs, so the
// coordinator does not initialise the image stack at every start.
func TestLinksNoImageStack(t *testing.T) {
	for _, v := range linkcheck.Forbidden(t, ".", linkcheck.ImageStack) {
		t.Errorf("lazaret-hc links image-stack package %s (forbidden %s): move what it needs into pkg/prepared", v.Dep, v.Rule)
	}
}
