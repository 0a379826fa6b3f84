package sandboxinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
)

// Shell-compatible statuses for a command that cannot run.
const (
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// ExecMain is the session launcher role: it resolves argv[0] on the guest's
// PATH and replaces itself with the command (same guest pid), so a missing
// or non-executable command reports 127/126 with a shell-like message
// instead of a runtime error.
func ExecMain(args []string) int {
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
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "lazaret: %s: %v\n", args[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return ExitNotFound
	}
	return ExitNotExecutable
}
