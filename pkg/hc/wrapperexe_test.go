package hc

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/lazaret/lazaret/pkg/locate"
)

// TestWrapperExecutable: the CLI's --front-exe hosts the coordinator's
// wrappers only when it is an absolute path to an executable regular file;
// anything else falls back to this binary, which hosts the same roles.
func TestWrapperExecutable(t *testing.T) {
	self, err := locate.Self()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	front := filepath.Join(dir, "lazaret")
	if err := os.WriteFile(front, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, front, want string }{
		{"front", front, front},
		{"unset", "", self},
		{"relative", "lazaret", self},
		{"missing", filepath.Join(dir, "gone"), self},
		{"directory", dir, self},
		{"not executable", plain, self},
	} {
		co := &coordinator{log: slog.New(slog.DiscardHandler), cfg: generationConfig{frontExe: c.front}}
		if got := co.wrapperExecutable(); got != c.want {
			t.Errorf("%s: wrapperExecutable() = %q, want %q", c.name, got, c.want)
		}
	}
}
