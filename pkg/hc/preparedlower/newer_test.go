package preparedlower

import (
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/store/storetest"
)

// TestRecoverNewerRecordRefused: a dead generation whose prepared_lower
// record a newer build wrote is live for bootstrap recovery (the
// coordinator must not skip it as done), also once its state_anchor is
// Clean (a crash inside release), and Recover refuses it, naming the
// record version, keeping the lease; a newer state_anchor record is
// refused the same way.
func TestRecoverNewerRecordRefused(t *testing.T) {
	for name, c := range map[string]struct {
		role        participant.Role
		anchorClean bool
	}{
		"prepared_lower":                       {participant.PreparedLower, false},
		"prepared_lower beside a Clean anchor": {participant.PreparedLower, true},
		"state_anchor":                         {participant.StateAnchor, false},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			const gen = 1
			f.acquire(gen, f.gone())
			if c.anchorClean {
				f.cleanAnchor(gen)
			}
			f.st = storetest.NewerParticipant(t, f.st, f.dir, f.lock, gen, c.role)
			if !f.live(gen) {
				t.Fatalf("a generation with a newer %s record is not live for recovery", c.role)
			}
			refusals := f.service(nil).Recover(gen)
			if len(refusals) == 0 || !strings.Contains(strings.Join(refusals, "; "), "record_version") {
				t.Fatalf("recovery of a newer %s record: %v", c.role, refusals)
			}
			if !f.leased(gen) {
				t.Fatal("the lease was released beside a newer record")
			}
		})
	}
}
