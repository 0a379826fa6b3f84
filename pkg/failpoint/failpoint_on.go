//go:build lazaret_failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// Enabled reports whether this is a failpoint build.
const Enabled = true

var armed = os.Getenv(Env)

// isArmed reports whether name is one of the armed stages: LAZARET_FAILPOINT
// names one stage, or several separated by commas (a test that needs two
// processes to die, each at its own stage).
func isArmed(name string) bool {
	if armed == "" || name == "" {
		return false
	}
	for _, s := range strings.Split(armed, ",") {
		if s == name {
			return true
		}
	}
	return false
}

// held is read-locked by every section Hold covers; Hit write-locks it
// before the kill, so a kill waits for the sections in progress.
var held sync.RWMutex

// Hold begins a section that a hit in another goroutine of this process
// does not cut in two, and returns its end: the hit waits until every held
// section has ended (a section begun while a hit waits waits for ever: the
// process is about to die). A section must not reach a Hit itself.
func Hold() (end func()) {
	held.RLock()
	return held.RUnlock
}

// Hit kills this process with SIGKILL if stage is an armed one, once no
// section Hold covers is in progress.
func Hit(name string) {
	if !isArmed(name) {
		return
	}
	held.Lock()
	fmt.Fprintf(os.Stderr, "failpoint hit: %s (pid %d): SIGKILL\n", name, os.Getpid())
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		fmt.Fprintf(os.Stderr, "failpoint: %v\n", err)
		os.Exit(137)
	}
	self.Signal(unix.SIGKILL)
	select {}
}

// Environ returns the variable to pass to children so the armed stage can
// be hit in whichever Lazaret process reaches it.
func Environ() []string {
	if armed == "" {
		return nil
	}
	return []string{Env + "=" + armed}
}

// Armed reports whether name is an armed stage (for failpoints that act on
// another process, e.g. killing the attached runsc client).
func Armed(name string) bool {
	if isArmed(name) {
		fmt.Fprintf(os.Stderr, "failpoint hit: %s\n", name)
		return true
	}
	return false
}
