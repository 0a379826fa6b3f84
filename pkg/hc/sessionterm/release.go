package sessionterm

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// release is the physical release of the session terminal of the Session Terminal.
func (t *Terminal) release(ctx context.Context) {
	t.SetRoute(RouteDetached)
	if err := t.d.Recorder.RecordReleaseIntent(ctx, t.s.ID); err != nil {
		t.log.Error("record release intent", "err", err)
	}
	done := func() bool {
		if t.child == nil {
			return true
		}
		select {
		case <-t.child.Done():
			return true
		default:
			return false
		}
	}
	groupAbsent := !t.identified
	if t.identified {
		// Each step first re-checks the exact leader (pid, start time,
		// group): a mismatch or absence refuses the numeric group signal.
		// The exec client waits for exactly the leader, so its exit ends a
		// grace period early; after exec-client loss the leader is polled.
		gone := func() bool {
			deadline := t.clock.Now().Add(CloseGrace)
			for t.clock.Now().Before(deadline) {
				if !done() {
					select {
					case <-t.child.Done():
						return true
					case <-t.clock.After(CloseGrace):
						return false
					}
				}
				<-t.clock.After(250 * time.Millisecond)
				if !t.leaderMatches(ctx) {
					return true
				}
			}
			return false
		}
		for _, sig := range []unix.Signal{unix.SIGHUP, unix.SIGTERM, unix.SIGKILL} {
			if t.leaderCollected() || !t.leaderMatches(ctx) {
				break
			}
			t.signalGroup(sig)
			if gone() {
				break
			}
		}
		present, err := t.groupPresent(ctx)
		if err != nil {
			t.log.Warn("guest group state unknown", "guest_pgid", t.id.GuestPGID, "err", err)
		}
		groupAbsent = !present
	}
	if t.child != nil && !done() {
		t.child.Signal(unix.SIGKILL) // exact pidfd
		<-t.child.Done()
	}
	if t.master != nil {
		t.master.Close()
	}
	if !groupAbsent {
		t.log.Warn("guest process group outlived its leader: left in release intent for Domain teardown", "guest_pgid", t.id.GuestPGID)
		return
	}
	if err := t.d.Recorder.RecordClean(ctx, t.s.ID); err != nil {
		t.log.Error("record clean", "err", err)
		return
	}
	t.log.Debug("session terminal clean")
}

// leaderCollected reports whether the exec client has exited with the
// guest leader's own status, an exit below 128 (runsc exec's own failures,
// and a leader killed by a signal, are 128 and above): runsc exec returns
// it only once it has waited for the leader, so the leader is gone and
// needs no check in the guest (a `runsc exec` of cat, about 100 ms) before
// the group's remaining members are looked for.
func (t *Terminal) leaderCollected() bool {
	if t.child == nil {
		return false
	}
	select {
	case <-t.child.Done():
	default:
		return false
	}
	st, err := t.child.Status()
	return err == nil && st.Exited && st.Code < 128
}
