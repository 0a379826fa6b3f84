// Package locate finds Lazaret's own binaries and the pinned runsc.
//
// Search order for a program NAME (documented in README, "Install"):
//  1. an explicit override: the environment variable LAZARET_<NAME> (e.g.
//     LAZARET_RUNSC), else the host configuration's [programs] table — the
//     CLI folds the table into the getenv it passes to Find, and hands
//     configured paths to the Host Coordinator as LAZARET_<NAME>;
//  2. beside the running executable;
//  3. PREFIX/libexec/lazaret, where PREFIX is the executable's directory's parent;
//  4. PATH.
package locate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Program names.
const (
	CLI      = "lazaret-cli"
	HC       = "lazaret-hc"
	RS       = "lazaret-rs"
	Escalate = "lazaret-escalate"
	Init     = "lazaret-init"
	GitRoute = "lazaret-gitroute"
	Runsc    = "runsc"
)

// EnvVar returns the override variable for name.
func EnvVar(name string) string {
	return "LAZARET_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(name, "lazaret-"), "-", "_"))
}

// Find returns the absolute path of program name, or an error listing where
// it looked and what to do.
func Find(name string, getenv func(string) string) (string, error) {
	var tried []string
	if v := getenv(EnvVar(name)); v != "" {
		if IsExecutable(v) {
			return filepath.Abs(v)
		}
		return "", errdefs.New(errdefs.ErrUnsupportedHost, "%s=%s is not an executable file: fix or unset it", EnvVar(name), v)
	}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		dir := filepath.Dir(exe)
		for _, c := range []string{filepath.Join(dir, name), filepath.Join(filepath.Dir(dir), "libexec", "lazaret", name)} {
			tried = append(tried, c)
			if IsExecutable(c) {
				return c, nil
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	tried = append(tried, "$PATH")
	hint := "reinstall Lazaret (make build, or make install)"
	if name == Runsc {
		hint = "run `make setup` in the Lazaret checkout to build the pinned runsc, or set LAZARET_RUNSC (or runsc in the configuration's [programs]) to it"
	}
	return "", errdefs.New(errdefs.ErrUnsupportedHost, "%s not found (looked in %s): %s", name, strings.Join(tried, ", "), hint)
}

// Self returns the absolute path of the running executable, checked to
// name this very file (the inode /proc/self/exe names), so that another
// process can exec it (e.g. the Runtime Supervisor running the Host
// Coordinator's hidden roles). A binary replaced or removed since it
// started has no such path: an error.
func Self() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	self, err := NamesSelf(exe)
	if err != nil {
		return "", err
	}
	if !self || !IsExecutable(exe) {
		return "", errdefs.New(errdefs.ErrUnsupportedHost, "%s no longer names the running executable (replaced since it started?)", exe)
	}
	return exe, nil
}

// NamesSelf reports whether path names the file this process runs (the
// inode /proc/self/exe names).
func NamesSelf(path string) (bool, error) {
	running, err := os.Stat("/proc/self/exe")
	if err != nil {
		return false, err
	}
	named, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(running, named), nil
}

// IsExecutable reports whether p names a regular file with an execute bit.
func IsExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
