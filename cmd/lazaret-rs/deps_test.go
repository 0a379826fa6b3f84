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

// TestLinksNoDatabase: the Runtime Supervisor links no database library.
// It validates and holds the prepared tree it mounts (package prepared);
// whether the Storage Catalog lets it reuse that tree comes from the
// coordinator in StartSandbox, and the coordinator records every lease.
// RS's start is on the cold start's critical path (RS is held at its
// barrier until its packages have initialised), and pebble's imports were
// ~9 ms of it.
func TestLinksNoDatabase(t *testing.T) {
	for _, v := range linkcheck.Forbidden(t, ".", linkcheck.Database) {
		t.Errorf("lazaret-rs links database package %s (forbidden %s): read the Storage Catalog or the Domain Store in the coordinator and pass RS what it needs", v.Dep, v.Rule)
	}
}
