package netsetup

import (
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
)

// DropNetAdmin irreversibly removes CAP_NET_ADMIN from the effective,
// permitted, inheritable, ambient and bounding sets of every thread of this
// process (SR-5), keeping every other capability (lease-loss teardown still
// unmounts). It changes every thread (package capability), not a re-exec,
// which would kill the parent-death-coupled attached runsc client.
func DropNetAdmin() error { return capability.Drop(unix.CAP_NET_ADMIN) }
