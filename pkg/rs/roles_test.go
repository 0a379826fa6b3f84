package rs

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestRolesExecutable: RS runs its roles from --roles-exe only when it can
// exec that path here; anything else falls back to its own binary.
func TestRolesExecutable(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	exe := filepath.Join(dir, "lazaret-hc")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ roles, want string }{
		"unset":          {"", "/own"},
		"executable":     {exe, exe},
		"relative":       {"lazaret-hc", "/own"},
		"missing":        {filepath.Join(dir, "gone"), "/own"},
		"directory":      {dir, "/own"},
		"not executable": {plain, "/own"},
	} {
		if got := rolesExecutable("roles-exe", c.roles, "/own", log); got != c.want {
			t.Errorf("%s: rolesExecutable(%q) = %q, want %q", name, c.roles, got, c.want)
		}
	}
	// The preparer has no fallback: this binary does not host it.
	for name, c := range map[string]struct{ exe, want string }{
		"unset":      {"", ""},
		"executable": {exe, exe},
		"missing":    {filepath.Join(dir, "gone"), ""},
		"plain":      {plain, ""},
	} {
		if got := rolesExecutable("preparer-exe", c.exe, "", log); got != c.want {
			t.Errorf("preparer %s: rolesExecutable(%q) = %q, want %q", name, c.exe, got, c.want)
		}
	}
}
