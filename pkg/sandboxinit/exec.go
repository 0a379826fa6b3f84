package sandboxinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/lazaret/lazaret/pkg/ocispec"
)

// Shell-compatible statuses for a command that cannot run.
const (
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// ExecMain is the session launcher role: it resolves argv[0] on the guest's
// PATH and replaces itself with the command (same guest pid), so a missing
// or non-executable command reports 127/126 with a shell-like message
// instead of a runtime error. With ocispec.LaunchEnvArg first, the
// GOMAXPROCS of its environment is its own (ocispec.Launch), which the
// command does not get.
func ExecMain(args []string) int {
	env := os.Environ()
	if len(args) > 0 && args[0] == ocispec.LaunchEnvArg {
		args = args[1:]
		env = launchEnv(env)
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "lazaret: empty command")
		return ExitNotFound
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			fmt.Fprintf(os.Stderr, "lazaret: %s: permission denied\n", args[0])
			return ExitNotExecutable
		}
		fmt.Fprintf(os.Stderr, "lazaret: %s: command not found in the sandbox\n", args[0])
		return ExitNotFound
	}
	err = syscall.Exec(path, args, env)
	fmt.Fprintf(os.Stderr, "lazaret: %s: %v\n", args[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return ExitNotFound
	}
	return ExitNotExecutable
}

// launchEnv is env without GOMAXPROCS, the launcher's own.
func launchEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "GOMAXPROCS=") {
			out = append(out, e)
		}
	}
	return out
}
