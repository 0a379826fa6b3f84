package rs

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/ocilayout"
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

// TestReuseDigest: a registry reference is reused without the image
// library only when it pins a canonical sha256 digest; a tag, or a digest
// in another form, is the preparer's; an oci: reference is package
// ocilayout's.
func TestReuseDigest(t *testing.T) {
	d := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for ref, want := range map[string]string{
		"docker://docker.io/library/debian@" + d:                               d,
		"docker://registry.example:5000/a/b:12@" + d:                           d,
		"docker://docker.io/library/debian:12":                                 "",
		"docker://docker.io/library/debian@sha256:" + strings.Repeat("AB", 32): "",
		"docker://docker.io/library/debian@sha512:" + strings.Repeat("ab", 64): "",
		"docker://docker.io/library/debian@" + d[:70]:                          "",
		"oci:" + t.TempDir() + ":latest":                                       "", // no layout there
	} {
		got, err := reuseDigest(ref)
		if want == "" {
			if !errors.Is(err, ocilayout.ErrUnresolved) {
				t.Errorf("%s: %q, %v; want ErrUnresolved", ref, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", ref, got, err, want)
		}
	}
}
