package proc

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/failpoint"
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

// MaybeRunWrapper runs the wrapper role and never returns if argv[1] names
// it; otherwise it returns immediately. Call it first thing in main.
func MaybeRunWrapper() {
	if len(os.Args) < 2 || os.Args[1] != WrapperArg {
		return
	}
	os.Exit(runWrapper(os.Args[2:]))
}

func runWrapper(args []string) int {
	// PR_SET_PDEATHSIG is per thread, and exec keeps the calling thread's
	// value: arm it and exec from this same locked thread.
	runtime.LockOSThread()
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "lazaret wrapper: "+format+"\n", a...)
		return wrapperAbort
	}
	slot := "unnamed"
	if len(args) > 0 && strings.HasPrefix(args[0], "--slot=") {
		slot, args = strings.TrimPrefix(args[0], "--slot="), args[1:]
	}
	hit := func(step string) { failpoint.Hit("wrapper:" + slot + ":" + step) }
	if len(args) < 3 || !strings.HasPrefix(args[0], "--barrier-fd=") || args[1] != "--" {
		return fail("usage: %s [--slot=NAME] --barrier-fd=N -- PATH ARGS...", WrapperArg)
	}
	fd, err := strconv.Atoi(strings.TrimPrefix(args[0], "--barrier-fd="))
	if err != nil || fd < 3 {
		return fail("bad barrier fd %q", args[0])
	}
	target, targetArgs := args[2], args[3:]
	barrier := os.NewFile(uintptr(fd), "barrier")
	hit("blocked")
	buf := make([]byte, releaseLen+1)
	n, err := io.ReadFull(barrier, buf)
	if err != io.ErrUnexpectedEOF || n != releaseLen {
		// EOF, short, or over-long release: fail closed.
		return wrapperAbort
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
	err = syscall.Exec(target, argv, os.Environ())
	return fail("exec %s: %v", target, err)
}
