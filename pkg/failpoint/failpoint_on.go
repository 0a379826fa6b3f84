//go:build lazaret_failpoints

package failpoint

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// Enabled reports whether this is a failpoint build.
const Enabled = true

var armed = os.Getenv(Env)

// Hit kills this process with SIGKILL if stage is the armed one.
func Hit(name string) {
	if armed == "" || name != armed {
		return
	}
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

// Armed reports whether name is the armed stage (for failpoints that act on
// another process, e.g. killing the attached runsc client).
func Armed(name string) bool {
	if armed != "" && armed == name {
		fmt.Fprintf(os.Stderr, "failpoint hit: %s\n", name)
		return true
	}
	return false
}
