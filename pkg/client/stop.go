package client

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Stop asks the Domain's coordinator to end every session and tear the
// generation down, and waits (at most wait) until it has released the
// Domain lock: the teardown is complete. It returns what the coordinator
// stopped, or nil when the Domain was not running (a Domain already
// stopping is waited for).
func Stop(paths domain.Paths, profile string, wait time.Duration) (*lv1.Stopping, error) {
	raw, err := Dial(paths)
	if errors.Is(err, ErrNotPublished) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := Authenticate(raw, paths, profile)
	if errors.Is(err, ErrNotPublished) {
		return nil, WaitUnlocked(paths, wait) // stopping already
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Stop{Stop: &lv1.StopRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1}}}); err != nil {
		return nil, WaitUnlocked(paths, wait)
	}
	var f lv1.ServerFrame
	if err := c.fc.Read(&f); err != nil {
		return nil, WaitUnlocked(paths, wait)
	}
	if e := f.GetError(); e != nil {
		return nil, frameError(e)
	}
	st := f.GetStopping()
	if st == nil {
		return nil, errdefs.New(errdefs.ErrCorrupt, "the Host Coordinator answered stop with %v", f.String())
	}
	return st, WaitUnlocked(paths, wait)
}

// WaitUnlocked waits, at most wait, until nothing holds the Domain lock:
// the coordinator holds it until its teardown is complete.
func WaitUnlocked(paths domain.Paths, wait time.Duration) error {
	lock, err := os.OpenFile(paths.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open Domain lock: %w", err)
	}
	defer lock.Close()
	began := time.Now()
	deadline := began.Add(wait)
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			unix.Flock(int(lock.Fd()), unix.LOCK_UN)
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("Domain lock: %w", err)
		}
		if time.Now().After(deadline) {
			return errdefs.New(errdefs.ErrUnavailable, "Domain %s did not finish stopping within %s; see %s (lazaret logs)", paths.ID, wait, paths.Log())
		}
		time.Sleep(lockWait(time.Since(began)))
	}
}
