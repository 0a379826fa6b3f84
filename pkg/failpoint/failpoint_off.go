//go:build !lazaret_failpoints

package failpoint

// Enabled reports whether this is a failpoint build.
const Enabled = false

// Hit does nothing in production builds.
func Hit(string) {}

// Hold does nothing in production builds: nothing kills the process at a
// stage.
func Hold() (end func()) { return noHold }

func noHold() {}

// Environ returns nothing in production builds: LAZARET_FAILPOINT is never
// read or forwarded.
func Environ() []string { return nil }

// Armed is always false in production builds.
func Armed(string) bool { return false }
