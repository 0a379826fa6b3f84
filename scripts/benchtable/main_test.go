package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchmarksDocCurrent: docs/BENCHMARKS.md is the table of the newest
// file in bench/results (after make bench, run go run ./scripts/benchtable
// and commit both).
func TestBenchmarksDocCurrent(t *testing.T) {
	if err := run("../../bench/results", "../../docs/BENCHMARKS.md", true); err != nil {
		t.Fatal(err)
	}
}

// TestCheckFindsStaleDoc: -check refuses a document that differs, and a
// write makes it current.
func TestCheckFindsStaleDoc(t *testing.T) {
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	os.WriteFile(out, []byte("stale\n"), 0o644)
	err := run("../../bench/results", out, true)
	if err == nil || !strings.Contains(err.Error(), "go run ./scripts/benchtable") {
		t.Fatalf("stale document: %v", err)
	}
	if err := run("../../bench/results", out, false); err != nil {
		t.Fatal(err)
	}
	if err := run("../../bench/results", out, true); err != nil {
		t.Fatalf("after writing: %v", err)
	}
}
