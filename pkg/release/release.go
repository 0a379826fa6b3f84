// Package release is the build identity the five Lazaret binaries share:
// the version stamped from git at build time (-ldflags -X, see Makefile) and
// the hidden argument with which lazaret-cli asks the lazaret front,
// lazaret-hc, lazaret-rs and lazaret-escalate for theirs (packagers may ship
// them separately, so `lazaret version` reports each one, not its own stamp
// five times).
package release

import (
	"fmt"
	"os"
	"strings"
)

// Version is stamped at build time:
// -X github.com/lazaret/lazaret/pkg/release.Version=$(git describe --always --dirty).
var Version = "dev"

// VersionArg is the hidden first argument to which a helper binary answers
// with Answer's line and exits 0.
const VersionArg = "--lazaret-release"

// Line is what a binary answers: "NAME VERSION".
func Line(name string) string { return name + " " + Version }

// MaybeAnswer answers VersionArg and exits; helpers call it first in main.
func MaybeAnswer(name string) {
	if len(os.Args) == 2 && os.Args[1] == VersionArg {
		fmt.Println(Line(name))
		os.Exit(0)
	}
}

// ParseLine reads a helper's answer, checking that it names want.
func ParseLine(out, want string) (string, error) {
	name, v, ok := strings.Cut(strings.TrimSpace(out), " ")
	if !ok || name != want || v == "" || strings.ContainsAny(v, " \n") {
		return "", fmt.Errorf("unexpected answer %q to %s (is it a Lazaret %s?)", strings.TrimSpace(out), VersionArg, want)
	}
	return v, nil
}
