// Package linkcheck is the test helper behind the binaries' "links no …"
// tests (cmd/lazaret-hc, cmd/lazaret-escalate, cmd/lazaret-init,
// cmd/lazaret-gitroute, cmd/lazaret-rs, and the
// front's TestFrontStaysLean in cmd/lazaret/runverb): it lists
// what a main package links with `go list -deps` and reports every
// dependency a forbidden rule names.
package linkcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// ImageStack are the rules of the binaries that link no image library
// (lazaret-hc, lazaret-rs): the container image and storage libraries and
// the packages of Lazaret's own that use them (image preparation and
// builds); what those binaries need of a prepared lower is in package
// prepared, and a local layout's manifest digest in package ocilayout.
var ImageStack = []string{
	"go.podman.io/image/", "go.podman.io/storage", "github.com/opencontainers/image-spec",
	"github.com/lazaret/lazaret/pkg/prepare", "github.com/lazaret/lazaret/pkg/imagebuild",
}

// Database are the rules of the binaries that link no database library
// (lazaret-rs): pebble and the packages of Lazaret's own that open one
// (the Domain Store, the Storage Catalog and what it coordinates). Linked,
// pebble and what it imports unconditionally (cockroachdb/errors,
// sentry-go, Prometheus' client and golang/protobuf's descriptors) cost
// ~9 ms of every start of the binary, measured with --lazaret-release.
var Database = []string{
	"github.com/cockroachdb/pebble", "github.com/lazaret/lazaret/pkg/store",
	"github.com/lazaret/lazaret/pkg/catalog", "github.com/lazaret/lazaret/pkg/preparedcatalog",
}

// Violation is one linked package and the rule that forbids it.
type Violation struct {
	Dep, Rule string
}

// Forbidden returns the packages pkg (a directory or import path) links
// that a rule forbids. A rule forbids the package it names and those below
// it; a rule ending in "/" forbids every path with that prefix. It fails t
// when the go command cannot list the dependencies.
func Forbidden(t testing.TB, pkg string, rules []string) []Violation {
	t.Helper()
	return ForbiddenTagged(t, pkg, "", rules)
}

// ForbiddenTagged is Forbidden for a build with the build tags tags
// (space-separated; "" for none).
func ForbiddenTagged(t testing.TB, pkg, tags string, rules []string) []Violation {
	t.Helper()
	args := []string{"list", "-deps"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.Command(goCommand(), append(args, pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s printed only %d packages: %q", pkg, len(deps), out)
	}
	var vs []Violation
	for _, d := range deps {
		for _, r := range rules {
			if Matches(d, r) {
				vs = append(vs, Violation{d, r})
			}
		}
	}
	return vs
}

// goCommand is the go command of the toolchain running the test (the one
// on PATH when that one is absent).
func goCommand() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Matches reports whether rule forbids the import path dep.
func Matches(dep, rule string) bool {
	if strings.HasSuffix(rule, "/") {
		return strings.HasPrefix(dep, rule)
	}
	return dep == rule || strings.HasPrefix(dep, rule+"/")
}
