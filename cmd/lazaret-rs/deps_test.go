package main

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/linkcheck"
)

// TestLinksNoImageStack: the Runtime Supervisor links no image library. Its
// reuse check reads a local layout's index (package ocilayout) and the
// prepared store (package prepared); a start that must prepare runs
// lazaret-cli's preparer role. Linked here, the image stack's package
// initialisation and page faults cost every cold start (~15 ms of RS's
// start, measured when it moved out).
func TestLinksNoImageStack(t *testing.T) {
	for _, v := range linkcheck.Forbidden(t, ".", linkcheck.ImageStack) {
		t.Errorf("lazaret-rs links image-stack package %s (forbidden %s): resolve it without the library (package ocilayout) or leave it to the preparer role", v.Dep, v.Rule)
	}
}
