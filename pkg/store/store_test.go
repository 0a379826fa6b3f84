package store

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// startGeneration drives generation n through the spec's acquisition
// orderings up to publication and one Running session.
func startGeneration(t testing.TB, s *Store, n uint64) {
	t.Helper()
	startSteps(n, func(what string, fn func(tx *Tx) error) { ok(t, what, s.Update(fn)) })
}

// startSteps calls step with each Update of startGeneration, in order.
func startSteps(n uint64, step func(what string, fn func(tx *Tx) error)) {
	step("generation", func(tx *Tx) error { return tx.CreateGeneration(newGen(n)) })
	// §3.5 lease acquisition 1 and 3 (2 is the catalog).
	step("prepared_lower intent", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.PreparedLower, participant.Intent, plSnap("pl-1", v1.LeaseState_LEASE_STATE_INTENT))
	})
	step("prepared_lower lease held", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.PreparedLower, participant.LeaseHeld, plSnap("pl-1", v1.LeaseState_LEASE_STATE_HELD))
	})
	// Sandbox: RS acquired (staged, committed on Hello), then runsc.
	step("sandbox intent", func(tx *Tx) error { return tx.PutParticipant(n, participant.Sandbox, participant.Intent, nil) })
	step("rs staged", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Sandbox, participant.Intent, sbSnap("", nil, StagedSlot(rsProc), nil))
	})
	step("rs committed", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Sandbox, participant.Intent, sbSnap("", nil, CommittedSlot(rsProc), nil))
	})
	// 4. state anchor.
	step("anchor intent", func(tx *Tx) error { return tx.PutParticipant(n, participant.StateAnchor, participant.Intent, nil) })
	step("anchor staged", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.StateAnchor, participant.Intent, saSnap("pl-1", nil, StagedSlot(anchorD)))
	})
	step("anchor prepared", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.StateAnchor, participant.Prepared, saSnap("pl-1", anchorMount, CommittedSlot(anchorD)))
	})
	// Helper, then network readiness.
	step("helper intent", func(tx *Tx) error { return tx.PutParticipant(n, participant.Helper, participant.Intent, nil) })
	step("helper staged", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Helper, participant.Intent, helperSnap(StagedSlot(helpProc), nil))
	})
	step("helper committed", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Helper, participant.Committed, helperSnap(CommittedSlot(helpProc), CommittedSlot(rsProc)))
	})
	step("network intent", func(tx *Tx) error { return tx.PutParticipant(n, participant.Network, participant.Intent, nil) })
	step("network partial", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Network, participant.Intent, &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Network{Network: &v1.NetworkSnapshotV1{Netns: testNetns, Supervisor: CommittedSlot(rsProc)}}})
	})
	step("network committed", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Network, participant.Committed, netSnap(n, CommittedSlot(rsProc), rsProc))
	})
	step("runsc staged", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Sandbox, participant.Intent, sbSnap("ctr-1", nil, CommittedSlot(rsProc), StagedSlot(runscProc)))
	})
	step("sandbox committed", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Sandbox, participant.Committed, sbSnap("ctr-1", CommittedSlot(hcProc), CommittedSlot(rsProc), CommittedSlot(runscProc)))
	})
	step("publication intent", func(tx *Tx) error { return tx.PutParticipant(n, participant.Publication, participant.Intent, nil) })
	step("publication partial", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Publication, participant.Intent, pubSnap(fp("config")))
	})
	step("publication committed", func(tx *Tx) error {
		return tx.PutParticipant(n, participant.Publication, participant.Committed, pubSnap(fp("config")))
	})
	// §3.3 Session Terminal acquisition.
	step("session intent", func(tx *Tx) error { return tx.PutSessionTerminal(n, "s1", participant.Intent, nil) })
	step("session exec staged", func(tx *Tx) error {
		return tx.PutSessionTerminal(n, "s1", participant.Intent, sessSnap(nil, StagedSlot(execProc), false))
	})
	step("session running", func(tx *Tx) error {
		return tx.PutSessionTerminal(n, "s1", participant.Running, sessSnap(CommittedSlot(hcProc), CommittedSlot(execProc), true))
	})
}

// teardownGeneration follows the release orderings to an all-Clean state.
func teardownGeneration(t testing.TB, s *Store, n uint64) {
	t.Helper()
	teardownSteps(n, func(what string, fn func(tx *Tx) error) { ok(t, what, s.Update(fn)) })
}

// teardownSteps calls step with each Update of teardownGeneration, in order.
func teardownSteps(n uint64, step func(what string, fn func(tx *Tx) error)) {
	step("session release", func(tx *Tx) error { return tx.ReleaseSessionTerminal(n, "s1") })
	step("session clean", func(tx *Tx) error {
		return tx.CleanSessionTerminal(n, "s1", proofFor([]string{"pty", "container_id", "guest"}, hcProc, execProc))
	})
	for _, r := range []participant.Role{participant.Publication, participant.Sandbox, participant.Network, participant.Helper} {
		step("release "+string(r), func(tx *Tx) error { return tx.ReleaseParticipant(n, r) })
	}
	step("clean publication", func(tx *Tx) error {
		return tx.CleanParticipant(n, participant.Publication, proofFor([]string{"control_socket", "configuration_fingerprint"}))
	})
	step("clean sandbox", func(tx *Tx) error {
		return tx.CleanParticipant(n, participant.Sandbox, proofFor([]string{"container_id"}, hcProc, rsProc, runscProc))
	})
	step("clean network", func(tx *Tx) error {
		return tx.CleanParticipant(n, participant.Network, proofFor([]string{"netns", "readiness_fingerprint", "readiness"}, rsProc))
	})
	step("clean helper", func(tx *Tx) error {
		return tx.CleanParticipant(n, participant.Helper, proofFor(nil, helpProc, rsProc))
	})
	// §3.5 unmount and lease release 1, 3, (4 is the catalog), 5.
	step("anchor release intent", func(tx *Tx) error { return tx.ReleaseParticipant(n, participant.StateAnchor) })
	step("anchor clean + lower release intent", func(tx *Tx) error {
		if err := tx.CleanParticipant(n, participant.StateAnchor, proofFor([]string{"prepared_artifact_id", "mounts"}, anchorD)); err != nil {
			return err
		}
		return tx.ReleaseParticipant(n, participant.PreparedLower)
	})
	step("lease release check", func(tx *Tx) error { return tx.CheckLeaseReleaseIntent(n, "pl-1") })
	step("lower clean", func(tx *Tx) error {
		return tx.CleanParticipant(n, participant.PreparedLower, proofFor([]string{"prepared_artifact_id"}))
	})
}

func TestLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	defer s.Close()
	startGeneration(t, s, 1)
	ok(t, "view", s.View(func(tx *Tx) error {
		ps, err := tx.Participants(1)
		if err != nil {
			return err
		}
		if len(ps) != 6 {
			t.Errorf("%d participants", len(ps))
		}
		for _, p := range ps {
			if !participant.IsActive(p.Role, p.Phase) {
				t.Errorf("%s is %s", p.Role, p.Phase)
			}
		}
		st, err := tx.SessionTerminal(1, "s1")
		if err != nil {
			return err
		}
		if st.Phase != participant.Running || st.View.Slots["exec_client"].Identity != execProc {
			t.Errorf("session %+v", st)
		}
		g, err := tx.Generation(1)
		if err != nil {
			return err
		}
		if g.BootID != testBoot || g.Coordinator.Identity != hcProc || g.CoordinatorID != "hc-1" || len(g.ComponentIDs) != 2 || g.Created.IsZero() {
			t.Errorf("generation %+v", g)
		}
		return nil
	}))
	mustRefuse(t, "lease release check while held", s.View(func(tx *Tx) error { return tx.CheckLeaseReleaseIntent(1, "pl-1") }))
	teardownGeneration(t, s, 1)
	ok(t, "all clean", s.View(func(tx *Tx) error {
		ps, err := tx.Participants(1)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Phase != participant.Clean || !p.View.Empty() || p.Snapshot == nil {
				t.Errorf("%s: %s %+v", p.Role, p.Phase, p.View)
			}
		}
		return nil
	}))
	// Persisted across reopen; the next generation must be larger.
	s.Close()
	s = e.open(t)
	mustRefuse(t, "generation reuse", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(1)) }))
	ok(t, "generation 2", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(2)) }))
	ok(t, "latest", s.View(func(tx *Tx) error {
		n, err := tx.LatestGeneration()
		if n != 2 {
			t.Errorf("latest %d", n)
		}
		return err
	}))
}

// TestRefusals: every illegal transition of the participant rules is refused by the
// store API and leaves the store byte-for-byte unchanged.
func TestRefusals(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	defer s.Close()
	startGeneration(t, s, 1)
	ok(t, "gen 2", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(2)) }))
	ok(t, "sandbox 2 intent", s.Update(func(tx *Tx) error { return tx.PutParticipant(2, participant.Sandbox, participant.Intent, nil) }))
	ok(t, "sandbox 2 staged", s.Update(func(tx *Tx) error {
		return tx.PutParticipant(2, participant.Sandbox, participant.Intent, sbSnap("", nil, StagedSlot(rsProc), nil))
	}))
	ok(t, "lower 2 intent", s.Update(func(tx *Tx) error {
		return tx.PutParticipant(2, participant.PreparedLower, participant.Intent, plSnap("pl-1", v1.LeaseState_LEASE_STATE_INTENT))
	}))
	ok(t, "lower 2 lease held", s.Update(func(tx *Tx) error {
		return tx.PutParticipant(2, participant.PreparedLower, participant.LeaseHeld, plSnap("pl-1", v1.LeaseState_LEASE_STATE_HELD))
	}))
	ok(t, "bare intents", s.Update(func(tx *Tx) error {
		for _, err := range []error{
			tx.PutParticipant(2, participant.StateAnchor, participant.Intent, nil),
			tx.PutParticipant(2, participant.Helper, participant.Intent, nil),
			tx.PutSessionTerminal(1, "s2", participant.Intent, nil),
			tx.PutSessionTerminal(1, "s4", participant.Intent, nil),
			tx.PutSessionTerminal(2, "s2", participant.Intent, nil),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	}))

	other := rsProc
	other.Ino = 999
	wrongBoot := rsProc
	wrongBoot.BootID = otherBoot
	legacy := &v1.ProcessSlotV1{State: &v1.ProcessSlotV1_Committed{Committed: &v1.HostProcessIdentityV1{
		Kind: &v1.HostProcessIdentityV1_LegacyUnverified{LegacyUnverified: &v1.LegacyUnverifiedProcessIdentityV1{HostPid: 5}}}}}
	cases := []struct {
		name string
		fn   func(tx *Tx) error
	}{
		{"staged evidence replaced", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Intent, sbSnap("", nil, StagedSlot(other), nil))
		}},
		{"staged evidence cleared", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Intent, sbSnap("ctr", nil, nil, nil))
		}},
		{"snapshot cleared", func(tx *Tx) error { return tx.PutParticipant(2, participant.Sandbox, participant.Intent, nil) }},
		{"committed evidence replaced", func(tx *Tx) error {
			return tx.PutParticipant(1, participant.Sandbox, participant.Committed, sbSnap("ctr-1", CommittedSlot(hcProc), CommittedSlot(other), CommittedSlot(runscProc)))
		}},
		{"field replaced in active", func(tx *Tx) error {
			return tx.PutParticipant(1, participant.Sandbox, participant.Committed, sbSnap("ctr-2", CommittedSlot(hcProc), CommittedSlot(rsProc), CommittedSlot(runscProc)))
		}},
		{"field present -> absent", func(tx *Tx) error {
			return tx.PutParticipant(1, participant.Sandbox, participant.Committed, sbSnap("", CommittedSlot(hcProc), CommittedSlot(rsProc), CommittedSlot(runscProc)))
		}},
		{"unassigned -> committed skipping staged", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Intent, sbSnap("", nil, StagedSlot(rsProc), CommittedSlot(runscProc)))
		}},
		{"staged satisfies active", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Committed, sbSnap("ctr", CommittedSlot(hcProc), StagedSlot(rsProc), StagedSlot(runscProc)))
		}},
		{"legacy entered directly", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Intent, sbSnap("", legacy, StagedSlot(rsProc), nil))
		}},
		{"bare intent -> active", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.StateAnchor, participant.Prepared, saSnap("pl-1", anchorMount, CommittedSlot(anchorD)))
		}},
		{"create with ownership", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.GitRouting, participant.Intent, &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_GitRouting{GitRouting: &v1.GitRoutingSnapshotV1{Daemon: StagedSlot(gitD)}}})
		}},
		{"create active", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Publication, participant.Committed, pubSnap(fp("config")))
		}},
		{"clean via put", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Clean, EmptyRoleSnapshot(participant.Sandbox))
		}},
		{"clean without proof", func(tx *Tx) error {
			if err := tx.ReleaseParticipant(2, participant.Sandbox); err != nil {
				return err
			}
			return tx.CleanParticipant(2, participant.Sandbox, participant.AbsenceProof{})
		}},
		{"clean proof missing a process", func(tx *Tx) error {
			if err := tx.ReleaseParticipant(2, participant.Sandbox); err != nil {
				return err
			}
			return tx.CleanParticipant(2, participant.Sandbox, proofFor(nil, hcProc))
		}},
		{"clean of an active record", func(tx *Tx) error {
			return tx.CleanParticipant(1, participant.Sandbox, proofFor([]string{"container_id"}, hcProc, rsProc, runscProc))
		}},
		{"clean bare intent without runtime absence", func(tx *Tx) error {
			return tx.CleanParticipant(2, participant.StateAnchor, proofFor(nil))
		}},
		{"release intent of bare intent", func(tx *Tx) error { return tx.ReleaseParticipant(2, participant.StateAnchor) }},
		{"snapshot of another role", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Intent, helperSnap(StagedSlot(helpProc), nil))
		}},
		{"identity of another boot", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Helper, participant.Intent, helperSnap(StagedSlot(wrongBoot), nil))
		}},
		{"direct edge not the HC", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Sandbox, participant.Intent, sbSnap("", CommittedSlot(other), StagedSlot(rsProc), nil))
		}},
		{"direct RS edge while RS only staged", func(tx *Tx) error {
			return tx.PutParticipant(2, participant.Helper, participant.Intent, helperSnap(nil, CommittedSlot(rsProc)))
		}},
		{"anchor prepared on another artifact", func(tx *Tx) error {
			if err := tx.PutParticipant(2, participant.StateAnchor, participant.Intent, saSnap("pl-other", nil, StagedSlot(anchorD))); err != nil {
				return err
			}
			return tx.PutParticipant(2, participant.StateAnchor, participant.Prepared, saSnap("pl-other", anchorMount, CommittedSlot(anchorD)))
		}},
		{"anchor prepared while its supervisor is only staged", func(tx *Tx) error {
			if err := tx.PutParticipant(2, participant.StateAnchor, participant.Intent, saSnap("pl-1", nil, StagedSlot(anchorD))); err != nil {
				return err
			}
			return tx.PutParticipant(2, participant.StateAnchor, participant.Prepared, saSnap("pl-1", anchorMount, CommittedSlot(anchorD)))
		}},
		{"lower release under a live anchor", func(tx *Tx) error { return tx.ReleaseParticipant(1, participant.PreparedLower) }},
		{"lower release with anchor in release intent", func(tx *Tx) error {
			if err := tx.ReleaseParticipant(1, participant.StateAnchor); err != nil {
				return err
			}
			return tx.ReleaseParticipant(1, participant.PreparedLower)
		}},
		{"network evidence of another generation", func(tx *Tx) error {
			if err := tx.ReleaseParticipant(1, participant.Network); err != nil { // make room: use gen 1's helper
				return err
			}
			return errdefs.New(errdefs.ErrRefused, "placeholder")
		}},
		{"publication before the sandbox", func(tx *Tx) error {
			if err := tx.PutParticipant(2, participant.Publication, participant.Intent, pubSnap(fp("config"))); err != nil {
				return err
			}
			return tx.PutParticipant(2, participant.Publication, participant.Committed, pubSnap(fp("config")))
		}},
		{"session running with staged exec client", func(tx *Tx) error {
			if err := tx.PutSessionTerminal(1, "s2", participant.Intent, sessSnap(nil, StagedSlot(execProc), false)); err != nil {
				return err
			}
			return tx.PutSessionTerminal(1, "s2", participant.Running, sessSnap(CommittedSlot(hcProc), StagedSlot(execProc), true))
		}},
		{"session bare intent -> running", func(tx *Tx) error {
			return tx.PutSessionTerminal(1, "s4", participant.Running, sessSnap(CommittedSlot(hcProc), CommittedSlot(execProc), true))
		}},
		{"session running in a sandbox that is not committed", func(tx *Tx) error {
			if err := tx.PutSessionTerminal(2, "s2", participant.Intent, sessSnap(nil, StagedSlot(execProc), false)); err != nil {
				return err
			}
			return tx.PutSessionTerminal(2, "s2", participant.Running, sessSnap(CommittedSlot(hcProc), CommittedSlot(execProc), true))
		}},
		{"session evidence cleared", func(tx *Tx) error {
			return tx.PutSessionTerminal(1, "s1", participant.Running, sessSnap(CommittedSlot(hcProc), CommittedSlot(execProc), false))
		}},
		{"session clean without proof", func(tx *Tx) error {
			if err := tx.ReleaseSessionTerminal(1, "s1"); err != nil {
				return err
			}
			return tx.CleanSessionTerminal(1, "s1", participant.AbsenceProof{Kind: participant.AbsenceExact, Detail: "x"})
		}},
		{"session clean via put", func(tx *Tx) error {
			return tx.PutSessionTerminal(1, "s1", participant.Clean, &v1.SessionTerminalSnapshotV1{})
		}},
		{"ownership in the transaction that creates the intent", func(tx *Tx) error {
			if err := tx.PutParticipant(2, participant.GitRouting, participant.Intent, nil); err != nil {
				return err
			}
			return tx.PutParticipant(2, participant.GitRouting, participant.Intent, &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_GitRouting{GitRouting: &v1.GitRoutingSnapshotV1{Daemon: StagedSlot(gitD)}}})
		}},
		{"session ownership in the transaction that creates the intent", func(tx *Tx) error {
			if err := tx.PutSessionTerminal(1, "s3", participant.Intent, nil); err != nil {
				return err
			}
			return tx.PutSessionTerminal(1, "s3", participant.Intent, sessSnap(nil, StagedSlot(execProc), false))
		}},
		{"participant of a missing generation", func(tx *Tx) error {
			return tx.PutParticipant(9, participant.Sandbox, participant.Intent, nil)
		}},
	}
	before := dump(t, s.db)
	for _, c := range cases {
		if c.name == "network evidence of another generation" {
			continue // covered below with its own setup
		}
		err := s.Update(c.fn)
		mustRefuse(t, c.name, err)
		if testing.Verbose() {
			t.Logf("%-55s %v", c.name, err)
		}
		if after := dump(t, s.db); !sameDump(before, after) {
			t.Fatalf("%s: refused Update changed the store", c.name)
		}
	}
	// Readiness evidence naming another generation.
	ok(t, "gen 3", s.Update(func(tx *Tx) error {
		if err := tx.CreateGeneration(newGen(3)); err != nil {
			return err
		}
		return tx.PutParticipant(3, participant.Sandbox, participant.Intent, nil)
	}))
	ok(t, "gen 3 rs staged, helper intent", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(3, participant.Helper, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(3, participant.Sandbox, participant.Intent, sbSnap("", nil, StagedSlot(rsProc), nil))
	}))
	ok(t, "gen 3 rs + helper", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(3, participant.Sandbox, participant.Intent, sbSnap("", nil, CommittedSlot(rsProc), nil)); err != nil {
			return err
		}
		return tx.PutParticipant(3, participant.Helper, participant.Intent, helperSnap(StagedSlot(helpProc), nil))
	}))
	ok(t, "gen 3 helper committed, network partial", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(3, participant.Helper, participant.Committed, helperSnap(CommittedSlot(helpProc), CommittedSlot(rsProc))); err != nil {
			return err
		}
		return tx.PutParticipant(3, participant.Network, participant.Intent, &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Network{Network: &v1.NetworkSnapshotV1{Netns: testNetns}}})
	}))
	mustRefuse(t, "anchor intent without a held lease", s.Update(func(tx *Tx) error {
		return tx.PutParticipant(3, participant.StateAnchor, participant.Intent, nil)
	}))
	mustRefuse(t, "lease held without lease intent", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(3, participant.PreparedLower, participant.Intent, &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_PreparedLower{PreparedLower: &v1.PreparedLowerSnapshotV1{PreparedArtifactId: str("pl-1")}}}); err != nil {
			return err
		}
		return tx.PutParticipant(3, participant.PreparedLower, participant.LeaseHeld, plSnap("pl-1", v1.LeaseState_LEASE_STATE_HELD))
	}))
	mustRefuse(t, "network evidence of another generation", s.Update(func(tx *Tx) error {
		return tx.PutParticipant(3, participant.Network, participant.Committed, netSnap(1, CommittedSlot(rsProc), rsProc))
	}))
	err := s.Update(func(tx *Tx) error {
		return tx.PutParticipant(3, participant.Network, participant.Committed, netSnap(3, CommittedSlot(rsProc), other))
	})
	mustRefuse(t, "network evidence with another RS", err)
	if !strings.Contains(err.Error(), "not the committed RS") {
		t.Fatalf("network evidence with another RS: %v", err)
	}
	err = s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(3, participant.Publication, participant.Intent, pubSnap(fp("other"))); err != nil {
			return err
		}
		return tx.PutParticipant(3, participant.Publication, participant.Committed, pubSnap(fp("other")))
	})
	mustRefuse(t, "publication with another fingerprint", err)
	if !strings.Contains(err.Error(), "fingerprint is not the generation's") {
		t.Fatalf("publication with another fingerprint: %v", err)
	}
	ok(t, "network evidence of this generation", s.Update(func(tx *Tx) error {
		return tx.PutParticipant(3, participant.Network, participant.Committed, netSnap(3, CommittedSlot(rsProc), rsProc))
	}))
	// A refused mutator inside an Update whose function swallows the error
	// still wrote nothing.
	before = dump(t, s.db)
	ok(t, "swallowed refusal", s.Update(func(tx *Tx) error {
		_ = tx.PutParticipant(1, participant.Sandbox, participant.Intent, nil)
		return nil
	}))
	if !sameDump(before, dump(t, s.db)) {
		t.Fatal("a refused mutator wrote")
	}
	// Writes in a View refuse.
	if err := s.View(func(tx *Tx) error { return tx.CreateGeneration(newGen(10)) }); err == nil {
		t.Fatal("write in View accepted")
	}
}

func TestMailbox(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	defer s.Close()
	ok(t, "gen", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(1)) }))
	ok(t, "put", s.Update(func(tx *Tx) error {
		return tx.PutMailbox(1, &v1.GenerationMailboxRecordV1{MailboxId: "mb-1"})
	}))
	dir := &v1.FileIdentityV1{Dev: 1, Ino: 2, PathHint: "/run/mb"}
	ok(t, "directory", s.Update(func(tx *Tx) error {
		return tx.PutMailbox(1, &v1.GenerationMailboxRecordV1{MailboxId: "mb-1", Directory: dir, NextRequestSequence: 3})
	}))
	mustRefuse(t, "id replaced", s.Update(func(tx *Tx) error {
		return tx.PutMailbox(1, &v1.GenerationMailboxRecordV1{MailboxId: "mb-2", Directory: dir, NextRequestSequence: 3})
	}))
	mustRefuse(t, "directory cleared", s.Update(func(tx *Tx) error {
		return tx.PutMailbox(1, &v1.GenerationMailboxRecordV1{MailboxId: "mb-1", NextRequestSequence: 3})
	}))
	mustRefuse(t, "sequence back", s.Update(func(tx *Tx) error {
		return tx.PutMailbox(1, &v1.GenerationMailboxRecordV1{MailboxId: "mb-1", Directory: dir, NextRequestSequence: 2})
	}))
	ok(t, "read", s.View(func(tx *Tx) error {
		m, err := tx.Mailbox(1)
		if err == nil && (m.GetNextRequestSequence() != 3 || m.GetCreatedUnixNano() == 0) {
			t.Errorf("mailbox %v", m)
		}
		return err
	}))
}

func TestOpenLockDiscipline(t *testing.T) {
	root, lock := lockedRoot(t)
	if _, err := Open(root, nil, testID, Options{Logger: quietLogger()}); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("nil lock: %v", err)
	}
	other, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := Open(root, other, testID, Options{Logger: quietLogger()}); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("foreign lock file: %v", err)
	}
	// The right file, but through a descriptor that does not hold the lock.
	second, err := os.Open(filepath.Join(root, LockName))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := Open(root, second, testID, Options{Logger: quietLogger()}); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("unheld lock: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, Dir)); !os.IsNotExist(err) {
		t.Fatalf("store created without the lock: %v", err)
	}
	s, err := Open(root, lock, testID, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.formatMajorVersion(); got != FormatMajorVersion {
		t.Fatalf("format major version %d, pinned %d", got, FormatMajorVersion)
	}
	if unix.Flock(int(second.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		t.Fatal("lock not held")
	}
}

func TestDomainIdentityVerified(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	s.Close()
	for _, id := range []DomainIdentity{
		{ID: testID.ID, Profile: "other", CanonicalWorkspace: testID.CanonicalWorkspace},
		{ID: testID.ID, Profile: testID.Profile, CanonicalWorkspace: "/elsewhere"},
		{ID: domain.DeriveID("other", "/home/dev/ws"), Profile: testID.Profile, CanonicalWorkspace: testID.CanonicalWorkspace},
	} {
		if _, err := Open(e.root, e.lock, id, Options{Logger: quietLogger()}); !errors.Is(err, errdefs.ErrRefused) {
			t.Errorf("%+v: %v", id, err)
		}
	}
	s = e.open(t)
	s.Close()
}

func TestNewerSchemaRefusedBeforeAnyOtherRead(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	startGeneration(t, s, 1)
	s.Close()
	db := e.rawDB(t)
	ok(t, "plant v3", db.Set(keyVersion, marshal(&v1.SchemaVersionV1{Version: SchemaVersion + 1}), pebble.Sync))
	before := dump(t, db)
	db.Close()

	var reads []string
	_, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), readObserver: func(k []byte) { reads = append(reads, string(k)) }})
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open newer schema: %v", err)
	}
	if len(reads) != 1 || reads[0] != string(keyVersion) {
		t.Fatalf("reads before refusal: %q", reads)
	}
	// Even a wrong Domain identity is not looked at: the version refuses first.
	reads = nil
	_, err = Open(e.root, e.lock, DomainIdentity{ID: testID.ID, Profile: "x", CanonicalWorkspace: "/y"}, Options{Logger: quietLogger(), readObserver: func(k []byte) { reads = append(reads, string(k)) }})
	if !errors.Is(err, errdefs.ErrRefused) || len(reads) != 1 {
		t.Fatalf("open newer schema, other identity: %v %q", err, reads)
	}
	db = e.rawDB(t)
	defer db.Close()
	if !sameDump(before, dump(t, db)) {
		t.Fatal("refused open changed the store")
	}
}

func TestMalformedVersion(t *testing.T) {
	for name, plant := range map[string]func(db *pebble.DB) error{
		"records without version": func(db *pebble.DB) error { return db.Set([]byte("g/x"), []byte("y"), pebble.Sync) },
		"version zero": func(db *pebble.DB) error {
			return db.Set(keyVersion, marshal(&v1.SchemaVersionV1{}), pebble.Sync)
		},
		"garbage version": func(db *pebble.DB) error { return db.Set(keyVersion, []byte{0xff, 0xff}, pebble.Sync) },
	} {
		e := newEnv(t, nil)
		db := e.rawDB(t)
		ok(t, name, plant(db))
		db.Close()
		if _, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger()}); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// --- migrations ---

// migrationTests has one case per entry of migrations.
var migrationTests = map[string]func(t *testing.T){
	"v1-pid-start-to-legacy-unverified": testMigrationV1PidStart,
}

func TestEveryMigrationTested(t *testing.T) {
	want := uint32(1)
	for _, m := range migrations {
		if m.from != want || m.to != m.from+1 {
			t.Errorf("migration %s: %d -> %d breaks the ordered chain", m.name, m.from, m.to)
		}
		want = m.to
		if migrationTests[m.name] == nil {
			t.Errorf("migration %s has no test case in migrationTests", m.name)
		}
	}
	if want != SchemaVersion {
		t.Errorf("migrations end at %d, schema is %d", want, SchemaVersion)
	}
	for name := range migrationTests {
		found := false
		for _, m := range migrations {
			found = found || m.name == name
		}
		if !found {
			t.Errorf("test case %s names no migration", name)
		}
	}
}

func TestMigrations(t *testing.T) {
	for _, m := range migrations {
		if fn := migrationTests[m.name]; fn != nil {
			t.Run(m.name, fn)
		}
	}
}

func v1Slot(pid uint32, start uint64) *v1.ProcessSlotV1 {
	return &v1.ProcessSlotV1{State: &v1.ProcessSlotV1_SchemaV1PidStart{SchemaV1PidStart: &v1.SchemaV1PidStart{Pid: pid, StartTimeTicks: start}}}
}

// plantV1 writes a schema-v1 store: generation 1 whose HC, sandbox and
// session processes are PID/start-only values.
func plantV1(t testing.TB, db *pebble.DB) {
	b := db.NewBatch()
	set := func(k []byte, m interface{ ProtoReflect() protoreflect.Message }) {
		if err := b.Set(k, marshal(m), nil); err != nil {
			t.Fatal(err)
		}
	}
	set(keyDomain, &v1.DomainIdentityRecordV1{RecordVersion: 1, DomainId: string(testID.ID), Profile: testID.Profile, CanonicalWorkspace: testID.CanonicalWorkspace})
	set(generationKey(1), &v1.GenerationRecordV1{RecordVersion: 1, DomainId: string(testID.ID), Generation: 1, ConfigurationFingerprint: fp("c"),
		CoordinatorId: "hc-1", BootId: testBoot[:], CoordinatorProcess: v1Slot(100, 1)})
	set(participantKey(1, participant.Sandbox), &v1.ParticipantRecordV1{RecordVersion: 1, Generation: 1,
		Role: v1.ParticipantRole_PARTICIPANT_ROLE_SANDBOX, Phase: v1.ParticipantPhase_PARTICIPANT_PHASE_COMMITTED,
		Snapshot: sbSnap("ctr-1", v1Slot(100, 1), v1Slot(101, 2), v1Slot(102, 3))})
	set(participantKey(1, participant.PreparedLower), &v1.ParticipantRecordV1{RecordVersion: 1, Generation: 1,
		Role: v1.ParticipantRole_PARTICIPANT_ROLE_PREPARED_LOWER, Phase: v1.ParticipantPhase_PARTICIPANT_PHASE_LEASE_HELD,
		Snapshot: plSnap("pl-1", v1.LeaseState_LEASE_STATE_HELD)})
	set(sessionKey(1, "s1"), &v1.SessionTerminalRecordV1{RecordVersion: 1, Generation: 1, SessionId: "s1",
		Phase: v1.SessionTerminalPhase_SESSION_TERMINAL_PHASE_RELEASE_INTENT, Snapshot: &v1.SessionTerminalSnapshotV1{
			Coordinator: v1Slot(100, 1), ExecClient: v1Slot(103, 4), ContainerId: str("ctr-1")}})
	set(keyVersion, &v1.SchemaVersionV1{Version: 1})
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func isLegacy(s participant.Slot, pid uint32, start uint64) bool {
	return s.State == participant.CommittedSlot && s.Legacy != nil && s.Legacy.HostPID == pid && s.Legacy.StartTimeTicks == start &&
		s.Identity == (participant.Slot{}).Identity
}

func testMigrationV1PidStart(t *testing.T) {
	e := newEnv(t, nil)
	db := e.rawDB(t)
	plantV1(t, db)
	db.Close()

	s := e.open(t)
	defer s.Close()
	ok(t, "read migrated", s.View(func(tx *Tx) error {
		g, err := tx.Generation(1)
		if err != nil {
			return err
		}
		if !isLegacy(g.Coordinator, 100, 1) {
			t.Errorf("coordinator %s", g.Coordinator)
		}
		sb, err := tx.Participant(1, participant.Sandbox)
		if err != nil {
			return err
		}
		for name, want := range map[string][2]uint64{"coordinator": {100, 1}, "supervisor": {101, 2}, "runsc": {102, 3}} {
			if !isLegacy(sb.View.Slots[name], uint32(want[0]), want[1]) {
				t.Errorf("sandbox %s: %s", name, sb.View.Slots[name])
			}
		}
		st, err := tx.SessionTerminal(1, "s1")
		if err != nil {
			return err
		}
		if !isLegacy(st.View.Slots["exec_client"], 103, 4) {
			t.Errorf("exec client %s", st.View.Slots["exec_client"])
		}
		return nil
	}))
	// The version is 2 and the raw records hold no v1 value.
	s.Close()
	db = e.rawDB(t)
	d := dump(t, db)
	db.Close()
	v, _ := readVersion([]byte(d[string(keyVersion)]))
	if v != SchemaVersion {
		t.Fatalf("version after migration %d", v)
	}
	for k, val := range d {
		var m proto.Message
		switch {
		case strings.HasPrefix(k, prefixGeneration):
			m = &v1.GenerationRecordV1{}
		case strings.HasPrefix(k, prefixParticipant):
			m = &v1.ParticipantRecordV1{}
		case strings.HasPrefix(k, prefixSession):
			m = &v1.SessionTerminalRecordV1{}
		default:
			continue
		}
		ok(t, "decode "+k, unmarshal([]byte(k), []byte(val), m))
		if err := validateV2([]byte(k), m); err != nil {
			t.Errorf("%q after migration: %v", k, err)
		}
	}
	s = e.open(t)
	// Legacy never becomes authority: no direct edge can name it, no new
	// participant can be activated on it, it cannot be cleaned without an
	// explicit legacy resolution.
	mustRefuse(t, "direct RS edge to legacy RS", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(1, participant.Helper, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(1, participant.Helper, participant.Intent, helperSnap(nil, CommittedSlot(rsProc)))
	}))
	mustRefuse(t, "direct HC edge to legacy HC", s.Update(func(tx *Tx) error {
		return tx.PutSessionTerminal(1, "s9", participant.Intent, sessSnap(CommittedSlot(hcProc), nil, false))
	}))
	mustRefuse(t, "legacy record rewritten active", s.Update(func(tx *Tx) error {
		sb, err := tx.Participant(1, participant.Sandbox)
		if err != nil {
			return err
		}
		return tx.PutParticipant(1, participant.Sandbox, participant.Committed, sb.Snapshot)
	}))
	ok(t, "release legacy", s.Update(func(tx *Tx) error { return tx.ReleaseParticipant(1, participant.Sandbox) }))
	mustRefuse(t, "clean legacy without resolution", s.Update(func(tx *Tx) error {
		return tx.CleanParticipant(1, participant.Sandbox, proofFor([]string{"container_id"}))
	}))
	mustRefuse(t, "clean legacy session without resolution", s.Update(func(tx *Tx) error {
		return tx.CleanSessionTerminal(1, "s1", proofFor([]string{"container_id"}))
	}))
	ok(t, "clean legacy after operator resolution", s.Update(func(tx *Tx) error {
		p := proofFor([]string{"container_id"})
		p.Kind, p.LegacyResolved, p.Detail = participant.AbsenceIndependent, true, "rebooted; container absent"
		return tx.CleanParticipant(1, participant.Sandbox, p)
	}))
	s.Close()
}

// batchKeys lists the keys a batch sets, in order.
func batchKeys(b *pebble.Batch) []string {
	var keys []string
	r := b.Reader()
	for {
		_, k, _, more, err := r.Next()
		if err != nil || !more {
			return keys
		}
		keys = append(keys, string(k))
	}
}

// TestVersionWrittenLast: the batches that create the store and that
// migrate it write the version key last.
func TestVersionWrittenLast(t *testing.T) {
	e := newEnv(t, nil)
	db := e.rawDB(t)
	plantV1(t, db)
	db.Close()
	var batches [][]string
	s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), commitObserver: func(b *pebble.Batch) { batches = append(batches, batchKeys(b)) }})
	ok(t, "open", err)
	s.Close()
	e2 := newEnv(t, nil)
	s, err = Open(e2.root, e2.lock, testID, Options{Logger: quietLogger(), commitObserver: func(b *pebble.Batch) { batches = append(batches, batchKeys(b)) }})
	ok(t, "create", err)
	s.Close()
	if len(batches) != 2 {
		t.Fatalf("%d batches", len(batches))
	}
	for i, keys := range batches {
		if len(keys) < 2 || keys[len(keys)-1] != string(keyVersion) {
			t.Errorf("batch %d writes %q: version not last", i, keys)
		}
		for _, k := range keys[:len(keys)-1] {
			if k == string(keyVersion) {
				t.Errorf("batch %d writes the version twice", i)
			}
		}
	}
	if len(batches[0]) != 4 { // generation, sandbox, session (the rows holding v1 values), then the version
		t.Errorf("migration batch %q", batches[0])
	}
}

func TestMigrationRefusesMalformedV1(t *testing.T) {
	e := newEnv(t, nil)
	db := e.rawDB(t)
	plantV1(t, db)
	// A v1 participant of an unknown phase: the migration validates its
	// destination rows and refuses, leaving v1 in place.
	ok(t, "plant", db.Set(participantKey(1, participant.Helper), marshal(&v1.ParticipantRecordV1{RecordVersion: 1, Generation: 1,
		Role: v1.ParticipantRole_PARTICIPANT_ROLE_HELPER, Phase: v1.ParticipantPhase(42)}), pebble.Sync))
	before := dump(t, db)
	db.Close()
	if _, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger()}); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("open: %v", err)
	}
	db = e.rawDB(t)
	defer db.Close()
	if !sameDump(before, dump(t, db)) {
		t.Fatal("failed migration changed the store")
	}
}

func TestSpecsMatchProto(t *testing.T) {
	for role, msg := range map[participant.Role]protoreflect.Message{
		participant.PreparedLower:   (&v1.PreparedLowerSnapshotV1{}).ProtoReflect(),
		participant.StateAnchor:     (&v1.StateAnchorSnapshotV1{}).ProtoReflect(),
		participant.GitRouting:      (&v1.GitRoutingSnapshotV1{}).ProtoReflect(),
		participant.Network:         (&v1.NetworkSnapshotV1{}).ProtoReflect(),
		participant.Helper:          (&v1.HelperSnapshotV1{}).ProtoReflect(),
		participant.Sandbox:         (&v1.SandboxSnapshotV1{}).ProtoReflect(),
		participant.Publication:     (&v1.PublicationSnapshotV1{}).ProtoReflect(),
		participant.SessionTerminal: (&v1.SessionTerminalSnapshotV1{}).ProtoReflect(),
	} {
		spec := participant.Specs[role]
		fields := msg.Descriptor().Fields()
		seen := 0
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			name := string(fd.Name())
			if role == participant.PreparedLower && name == "lease_state" {
				continue
			}
			seen++
			if isSlotField(fd) {
				if _, ok := spec.Slots[name]; !ok {
					t.Errorf("%s: proto slot %s not in Specs", role, name)
				}
				continue
			}
			if _, ok := spec.Fields[name]; !ok {
				t.Errorf("%s: proto field %s not in Specs", role, name)
			}
			if !fd.HasPresence() {
				t.Errorf("%s: field %s has no presence", role, name)
			}
		}
		if seen != len(spec.Fields)+len(spec.Slots) {
			t.Errorf("%s: Specs names %d fields+slots, proto has %d", role, len(spec.Fields)+len(spec.Slots), seen)
		}
	}
}

func TestFatalLoggerPanicsWithDomainAndGeneration(t *testing.T) {
	var buf bytes.Buffer
	e := newEnv(t, nil)
	s, err := Open(e.root, e.lock, testID, Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ok(t, "gen", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(7)) }))
	l := fatalLogger{log: s.log, domain: s.id.ID, gen: s.gen}
	func() {
		defer func() {
			r := recover()
			fe, isFE := r.(*FatalError)
			if !isFE || fe.DomainID != testID.ID || fe.Generation != 7 || fe.Message != "boom 1" {
				t.Fatalf("panic value %#v", r)
			}
		}()
		l.Fatalf("boom %d", 1)
		t.Fatal("Fatalf returned")
	}()
	out := buf.String()
	if !strings.Contains(out, string(testID.ID)) || !strings.Contains(out, "generation=7") || !strings.Contains(out, "boom 1") {
		t.Fatalf("log %q", out)
	}
}

var _ vfs.FS = vfs.Default

// Pebble's informational messages (WAL replay) are the storage engine's
// own: debug level, so the Domain log at its default level has none.
func TestPebbleInfoIsDebug(t *testing.T) {
	var buf bytes.Buffer
	l := fatalLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), domain: testID.ID, gen: new(atomic.Uint64)}
	l.Infof("Found %d WALs", 1)
	l.Errorf("disk %s", "trouble")
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="Found 1 WALs"`) || !strings.Contains(out, `level=ERROR msg="disk trouble"`) {
		t.Errorf("log %q", out)
	}
}

// ReleaseAndClean ends a committed participant through ReleaseIntent with
// the exact proof, a bare Intent with a runtime-absence proof, refuses a
// proof that misses a recorded process, and does nothing for a participant
// never recorded or already Clean.
func TestReleaseAndClean(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	defer s.Close()
	startGeneration(t, s, 1)
	phase := func(role participant.Role) participant.Phase {
		var ph participant.Phase
		ok(t, "view "+string(role), s.View(func(tx *Tx) error {
			p, err := tx.Participant(1, role)
			if err != nil {
				return err
			}
			ph = p.Phase
			return nil
		}))
		return ph
	}
	// The helper records the helper process and RS: a proof naming only
	// the helper is refused, and nothing is written.
	mustRefuse(t, "helper without RS's absence", s.Update(func(tx *Tx) error {
		return tx.ReleaseAndClean(1, participant.Helper, "test", []pidfs.Authority{helpProc.Authority})
	}))
	if ph := phase(participant.Helper); ph == participant.Clean || ph == participant.ReleaseIntent {
		t.Fatalf("a refused ReleaseAndClean left the helper %s", ph)
	}
	ok(t, "helper", s.Update(func(tx *Tx) error {
		return tx.ReleaseAndClean(1, participant.Helper, "test", []pidfs.Authority{helpProc.Authority, rsProc.Authority})
	}))
	if ph := phase(participant.Helper); ph != participant.Clean {
		t.Fatalf("helper is %s, want Clean", ph)
	}
	ok(t, "helper again", s.Update(func(tx *Tx) error {
		return tx.ReleaseAndClean(1, participant.Helper, "test", nil)
	}))
	// A bare Intent (no snapshot) of a new generation.
	ok(t, "generation 2", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(2)) }))
	ok(t, "sandbox intent", s.Update(func(tx *Tx) error { return tx.PutParticipant(2, participant.Sandbox, participant.Intent, nil) }))
	ok(t, "bare intent", s.Update(func(tx *Tx) error { return tx.ReleaseAndClean(2, participant.Sandbox, "test", nil) }))
	ok(t, "never recorded", s.Update(func(tx *Tx) error { return tx.ReleaseAndClean(2, participant.Network, "test", nil) }))
	ok(t, "view generation 2", s.View(func(tx *Tx) error {
		p, err := tx.Participant(2, participant.Sandbox)
		if err != nil {
			return err
		}
		if p.Phase != participant.Clean {
			t.Errorf("bare sandbox intent is %s, want Clean", p.Phase)
		}
		if _, err := tx.Participant(2, participant.Network); !errors.Is(err, ErrNotFound) {
			t.Errorf("a never-recorded network participant: %v, want ErrNotFound", err)
		}
		return nil
	}))
}

// The store is sized for its few KiB of records: many generations of
// writes flush the small memtable to tables that reopen intact, and the
// store directory stays far below pebble's default footprint (a WAL
// preallocated to 1.1 × 4 MiB on disk).
func TestSizedForSmallStore(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	for n := uint64(1); n <= 20; n++ {
		startGeneration(t, s, n)
		teardownGeneration(t, s, n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var blocks int64
	dir := filepath.Join(e.root, Dir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, d := range ents {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, d.Name()), &st); err != nil {
			t.Fatal(err)
		}
		blocks += st.Blocks
		if strings.HasSuffix(d.Name(), ".sst") {
			tables++
		}
	}
	if on := blocks * 512; on > 1<<20 {
		t.Errorf("store occupies %d bytes on disk, want at most 1 MiB", on)
	}
	if tables == 0 {
		t.Errorf("20 generations never flushed the %d-byte memtable", MemTableSize)
	}
	s = e.open(t)
	defer s.Close()
	ok(t, "view", s.View(func(tx *Tx) error {
		ps, err := tx.Participants(20)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			t.Error("generation 20's participants lost across flushes")
		}
		return nil
	}))
}

// createRecorder is the real filesystem, recording the files pebble creates.
type createRecorder struct {
	vfs.FS
	mu      sync.Mutex
	created []string
}

func (r *createRecorder) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	r.mu.Lock()
	r.created = append(r.created, filepath.Base(name))
	r.mu.Unlock()
	return r.FS.Create(name, category)
}

// TestReopenAfterCloseWritesNoTable: Close flushes and compacts, so the
// next Open (on the cold-start path) has no WAL to replay into a new table
// and nothing in L0 to compact, and the records are all there. Without the
// compaction each Close of the three starts leaves its flushed table in
// L0, and pebble compacts two L0 tables as soon as the store opens.
func TestReopenAfterCloseWritesNoTable(t *testing.T) {
	e := newEnv(t, nil)
	for gen := uint64(1); gen <= 3; gen++ {
		s := e.open(t)
		startGeneration(t, s, gen)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rec := &createRecorder{FS: vfs.Default}
	s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), Now: fixedClock(), FS: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A compaction at Open either ran (it created a table) or is pending
	// (L0 still holds the tables it would compact).
	if n := s.db.Metrics().Levels[0].TablesCount; n != 0 {
		t.Errorf("the reopened store has %d tables in L0: Close left them for a compaction on the start-up path", n)
	}
	rec.mu.Lock()
	for _, name := range rec.created {
		if strings.HasSuffix(name, ".sst") {
			t.Errorf("reopening a closed store wrote table %s (created %v): Close left the WAL unflushed or L0 uncompacted", name, rec.created)
		}
	}
	rec.mu.Unlock()
	ok(t, "view", s.View(func(tx *Tx) error {
		for gen := uint64(1); gen <= 3; gen++ {
			ps, err := tx.Participants(gen)
			if err != nil {
				return err
			}
			if len(ps) != 6 {
				t.Errorf("%d participants of generation %d after reopening, want 6", len(ps), gen)
			}
		}
		return nil
	}))
}

// TestReleaseHeld: a participant holding a resource (recorded with a
// snapshot, not released) gets ReleaseIntent; one already released or
// Clean, a bare Intent and a role never recorded are left as they are,
// without an error (the teardown releases every role in one transaction,
// whatever the generation got to).
func TestReleaseHeld(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	defer s.Close()
	startGeneration(t, s, 1)
	release := func(what string, g uint64, role participant.Role, want bool) {
		t.Helper()
		var got bool
		ok(t, what, s.Update(func(tx *Tx) error {
			var err error
			got, err = tx.ReleaseHeld(g, role)
			return err
		}))
		if got != want {
			t.Errorf("%s: released %v, want %v", what, got, want)
		}
	}
	release("held sandbox", 1, participant.Sandbox, true)
	release("released sandbox", 1, participant.Sandbox, false)
	ok(t, "helper clean", s.Update(func(tx *Tx) error {
		return tx.ReleaseAndClean(1, participant.Helper, "test", []pidfs.Authority{helpProc.Authority, rsProc.Authority})
	}))
	release("clean helper", 1, participant.Helper, false)
	ok(t, "generation 2", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(2)) }))
	ok(t, "sandbox intent", s.Update(func(tx *Tx) error { return tx.PutParticipant(2, participant.Sandbox, participant.Intent, nil) }))
	release("bare intent", 2, participant.Sandbox, false)
	release("never recorded", 2, participant.GitRouting, false)
	ok(t, "view", s.View(func(tx *Tx) error {
		for _, c := range []struct {
			g    uint64
			role participant.Role
			want participant.Phase
		}{{1, participant.Sandbox, participant.ReleaseIntent}, {1, participant.Helper, participant.Clean}, {2, participant.Sandbox, participant.Intent}} {
			p, err := tx.Participant(c.g, c.role)
			if err != nil {
				return err
			}
			if p.Phase != c.want {
				t.Errorf("generation %d %s is %s, want %s", c.g, c.role, p.Phase, c.want)
			}
		}
		return nil
	}))
}
