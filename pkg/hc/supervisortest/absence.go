package supervisortest

import (
	"errors"
	"time"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// Absence returns the coordinator's recovery proof (PidfsRecoveryMatch)
// without its stop, for the role tests: an absent, recycled or other-boot
// process is proven gone; self (the test process standing in as the
// recorded coordinator; zero for none) counts as gone; a matched process
// must end within wait, else it is reported "still running" and never
// signalled.
func Absence(wait time.Duration, self pidfs.Identity) func(pidfs.Identity) error {
	return func(id pidfs.Identity) error {
		h, err := pidfs.RecoveryLive(id)
		if h == nil || err != nil {
			return err
		}
		defer h.Close()
		if self != (pidfs.Identity{}) && id == self {
			return nil
		}
		done, err := h.WaitTerminated(wait)
		if err != nil {
			return err
		}
		if !done {
			return errors.New("still running")
		}
		return nil
	}
}
