package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// WrapperArg is argv[1] of the wrapper role.
const WrapperArg = "__lazaret-wrapper"

// releaseMagic starts a barrier release record.
const releaseMagic = "LZRELv1\x00"

const releaseLen = len(releaseMagic) + 16 + 8 + 8

func encodeRelease(a pidfs.Authority) []byte {
	b := make([]byte, 0, releaseLen)
	b = append(b, releaseMagic...)
	b = append(b, a.BootID[:]...)
	b = binary.BigEndian.AppendUint64(b, a.Dev)
	b = binary.BigEndian.AppendUint64(b, a.Ino)
	return b
}

func decodeRelease(b []byte) (pidfs.Authority, bool) {
	var a pidfs.Authority
	if len(b) != releaseLen || string(b[:len(releaseMagic)]) != releaseMagic {
		return a, false
	}
	b = b[len(releaseMagic):]
	copy(a.BootID[:], b[:16])
	a.Dev = binary.BigEndian.Uint64(b[16:24])
	a.Ino = binary.BigEndian.Uint64(b[24:32])
	return a, true
}

// wrapperAbort is the wrapper's exit status when it refuses to run the target.
const wrapperAbort = 125

// HeldArg follows the slot in the arguments of an in-place wrapper
// (AcquireSpec.InPlace): the target's own binary, which goes on as the
// target once released.
const HeldArg = "--held-in-place"

// MaybeRunWrapper runs the wrapper role and never returns if argv[1] names
// it; otherwise it returns immediately. Call it first thing in main.
func MaybeRunWrapper() {
	if len(os.Args) < 2 || os.Args[1] != WrapperArg {
		return
	}
	_, code := runWrapper(os.Args[2:], false)
	os.Exit(code)
}

// MaybeRunWrapperInPlace is MaybeRunWrapper for a binary that is also the
// target of an in-place acquisition (AcquireSpec.InPlace). Held at the
// barrier it has initialised its packages; once the release arrives and
// the parent is re-checked, it drops the capabilities its spawn kept
// (Command.KeepCapabilities) and returns with os.Args set to the target's
// command line: main goes on as the target in the process whose identity
// the broker staged. The target's own work starts only after it returns.
// Any other wrapper role runs as in MaybeRunWrapper, and a refused release
// exits without returning.
//
// The parent-death signal is armed on the calling thread (the kernel keeps
// it per thread): the calling goroutine stays locked to that thread for
// the life of the process, so that thread is never ended while the
// process runs. Call it first thing in main, from the main goroutine.
func MaybeRunWrapperInPlace() {
	if len(os.Args) < 2 || os.Args[1] != WrapperArg {
		return
	}
	argv, code := runWrapper(os.Args[2:], true)
	if argv == nil {
		os.Exit(code)
	}
	os.Args = argv
}

// runWrapper is the wrapper role. It returns the target's argv only to a
// held in-place wrapper, which inPlace allows, once released; otherwise
// it executes the target, and its return is the abort status.
func runWrapper(args []string, inPlace bool) ([]string, int) {
	// PR_SET_PDEATHSIG is per thread, and exec keeps the calling thread's
	// value: arm it and exec (or go on in place) from this same locked
	// thread.
	runtime.LockOSThread()
	fail := func(format string, a ...any) ([]string, int) {
		fmt.Fprintf(os.Stderr, "lazaret wrapper: "+format+"\n", a...)
		return nil, wrapperAbort
	}
	slot := "unnamed"
	if len(args) > 0 && strings.HasPrefix(args[0], "--slot=") {
		slot, args = strings.TrimPrefix(args[0], "--slot="), args[1:]
	}
	hit := func(step string) { failpoint.Hit("wrapper:" + slot + ":" + step) }
	held := len(args) > 0 && args[0] == HeldArg
	if held {
		args = args[1:]
	}
	if len(args) < 3 || !strings.HasPrefix(args[0], "--barrier-fd=") || args[1] != "--" {
		return fail("usage: %s [--slot=NAME] [%s] --barrier-fd=N -- PATH ARGS...", WrapperArg, HeldArg)
	}
	fd, err := strconv.Atoi(strings.TrimPrefix(args[0], "--barrier-fd="))
	if err != nil || fd < 3 {
		return fail("bad barrier fd %q", args[0])
	}
	target, targetArgs := args[2], args[3:]
	if held {
		// Going on in place runs this image: the named target must be it.
		if !inPlace {
			return fail("%s cannot go on in place as %s", os.Args[0], target)
		}
		if self, err := locate.NamesSelf(target); err != nil || !self {
			return fail("refusing to go on in place as %s: not this process's executable (%v)", target, err)
		}
	}
	barrier := os.NewFile(uintptr(fd), "barrier")
	hit("blocked")
	buf := make([]byte, releaseLen+1)
	n, err := io.ReadFull(barrier, buf)
	if err != io.ErrUnexpectedEOF || n != releaseLen {
		// EOF, short, or over-long release: fail closed.
		return nil, wrapperAbort
	}
	want, ok := decodeRelease(buf[:n])
	if !ok {
		return fail("malformed barrier release")
	}
	barrier.Close()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fail("arm parent-death signal: %v", err)
	}
	hit("armed")
	// Close the arming race: the parent we armed against must be the exact
	// broker process that released us.
	ppid := os.Getppid()
	if ppid <= 1 {
		return fail("parent already gone")
	}
	parent, err := pidfs.Open(ppid)
	if err != nil {
		return fail("open parent pidfd: %v", err)
	}
	if !parent.Matches(want) {
		return fail("parent identity mismatch: refusing to run %s", target)
	}
	parent.Close()
	hit("before-exec")
	argv := append([]string{target}, targetArgs...)
	if held {
		// What the spawn kept (Command.KeepCapabilities) goes.
		switch err := capability.ClearInheritable(false); {
		case err == nil:
			return argv, 0 // the thread stays locked (see MaybeRunWrapperInPlace)
		case errors.Is(err, capability.ErrThisThreadOnly):
			// A cgo build: drop them on this thread and execute the
			// target, whose exec keeps only this thread.
			if err := capability.ClearInheritable(true); err != nil {
				return fail("drop the capabilities kept for the barrier: %v", err)
			}
		default:
			return fail("drop the capabilities kept for the barrier: %v", err)
		}
	}
	err = syscall.Exec(target, argv, os.Environ())
	return fail("exec %s: %v", target, err)
}
