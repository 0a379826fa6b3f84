package sandboxinit

import (
	"bytes"
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

// ExitNoIdentity is the status of a launcher that could not report its
// identity (ocispec.IdentityArg): the Host Coordinator would not admit the
// session's command, so it does not run.
const ExitNoIdentity = 125

// ExecMain is the session launcher role: it resolves argv[0] on the guest's
// PATH and replaces itself with the command (same guest pid), so a missing
// or non-executable command reports 127/126 with a shell-like message
// instead of a runtime error. Its options come before "--": with
// ocispec.LaunchEnvArg the GOMAXPROCS of its environment is its own
// (ocispec.Launch), which the command does not get; with
// ocispec.IdentityArg it reports its identity on ocispec.IdentityFD once
// the command is found (ReportIdentity), just before the exec.
func ExecMain(args []string) int {
	env := os.Environ()
	identify := false
options:
	for len(args) > 0 {
		switch args[0] {
		case ocispec.LaunchEnvArg:
			env = launchEnv(env)
		case ocispec.IdentityArg:
			identify = true
		case "--":
			args = args[1:]
			break options
		default:
			break options
		}
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "lazaret: empty command")
		return ExitNotFound
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		status, msg := lookupFailure(args[0], errors.Is(err, fs.ErrPermission))
		fmt.Fprint(os.Stderr, msg)
		return status
	}
	if identify {
		if err := ReportIdentity(ocispec.IdentityFD); err != nil {
			fmt.Fprintf(os.Stderr, "lazaret: %s: not started: %v\n", args[0], err)
			return ExitNoIdentity
		}
	}
	status, msg := execFailure(args[0], syscall.Exec(path, args, env))
	fmt.Fprint(os.Stderr, msg)
	return status
}

// lookupFailure is a shell's status and Lazaret's message for a command
// argv0 whose lookup failed: denied (found, but not executable) 126,
// otherwise 127. The launcher and the first session report alike.
func lookupFailure(argv0 string, denied bool) (status int, msg string) {
	if denied {
		return ExitNotExecutable, fmt.Sprintf("lazaret: %s: permission denied\n", argv0)
	}
	return ExitNotFound, fmt.Sprintf("lazaret: %s: command not found in the sandbox\n", argv0)
}

// execFailure is the same for an exec of argv0 that failed with err.
func execFailure(argv0 string, err error) (status int, msg string) {
	status = ExitNotExecutable
	if errors.Is(err, syscall.ENOENT) {
		status = ExitNotFound
	}
	return status, fmt.Sprintf("lazaret: %s: %v\n", argv0, err)
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

// ReportIdentity writes this process's /proc/self/stat line (its pid,
// process group and start time, which an in-place exec keeps) and a
// newline to descriptor fd, and closes fd so that the command does not
// inherit it. The Host Coordinator reads it as the guest leader's identity
// (sessionterm), instead of running a second `runsc exec` to read it.
func ReportIdentity(fd int) error {
	f := os.NewFile(uintptr(fd), "identity")
	if f == nil {
		return fmt.Errorf("no identity descriptor %d", fd)
	}
	defer f.Close()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return fmt.Errorf("read the identity: %w", err)
	}
	if _, err := f.Write(append(bytes.TrimSpace(b), '\n')); err != nil {
		return fmt.Errorf("report the identity on descriptor %d: %w", fd, err)
	}
	return f.Close()
}
