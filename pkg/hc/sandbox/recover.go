package sandbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
)

// Recovery is what Recover found of a dead generation's sandbox.
type Recovery struct {
	// Clean: the record is Clean or absent; its processes were proven
	// absent when it became Clean.
	Clean bool
	// Absent are the recorded authorities proven absent (for MarkClean),
	// set when Refusals is empty and Clean is false.
	Absent []pidfs.Authority
	// Refusals say why the record is retained: a recorded process not
	// proven absent (never signalled), or a legacy identity.
	Refusals []string
}

// Retained reports whether recovery must keep the record.
func (r Recovery) Retained() bool { return len(r.Refusals) > 0 }

// Reason joins the refusals.
func (r Recovery) Reason() string { return joinRefusals(r.Refusals) }

func joinRefusals(rs []string) string { return strings.Join(rs, "; ") }

// Recover reconciles dead generation gen's sandbox record through
// PidfsRecoveryMatch only (FR-7): a matched live RS, attached runsc or
// coordinator (a supervisor still finishing lease-loss teardown) is waited
// for, then stopped through the matched pidfd; an absent, foreign or
// other-boot one is proven gone; anything ambiguous or legacy is refused,
// never signalled. Once every recorded process is proven gone, proven is
// called (this coordinator, holding the Domain lock, recovers the
// generation) and runsc's sandbox and gofer are reconciled
// (ReconcileRunsc). The record itself is left for MarkClean: the
// coordinator cleans the generation's other records first.
func (s *Service) Recover(gen uint64, proven func()) Recovery {
	var p *store.Participant
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		p, err = tx.Participant(gen, participant.Sandbox)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return Recovery{Clean: true}
	}
	if err != nil {
		// A record this build cannot read (a newer build's, a corrupt
		// one) is no proof that its processes are gone: the generation
		// is retained, with the reason.
		return Recovery{Refusals: []string{fmt.Sprintf("sandbox record: %v", err)}}
	}
	if p.Phase == participant.Clean {
		return Recovery{Clean: true}
	}
	var absent []pidfs.Authority
	var refusals []string
	for _, name := range []string{"supervisor", "runsc", "coordinator"} {
		sl, ok := p.View.Slots[name]
		if !ok || sl.State == participant.Unassigned {
			continue
		}
		if sl.Legacy != nil {
			refusals = append(refusals, name+": legacy-unverified identity")
			continue
		}
		if err := s.cfg.AwaitAbsence(sl.Identity); err != nil {
			refusals = append(refusals, fmt.Sprintf("%s %s: %v", name, sl.Identity, err))
			continue
		}
		absent = append(absent, sl.Identity.Authority)
	}
	if len(refusals) > 0 {
		return Recovery{Refusals: refusals}
	}
	if proven != nil {
		proven()
	}
	// The snapshot's own field: View.Fields holds canonical encodings
	// (store's "s:" prefix), not the container ID.
	container := p.Snapshot.GetSandbox().GetContainerId()
	if container == "" {
		container = runsc.ContainerID(string(s.cfg.Domain), gen) // crashed before SandboxReady recorded it
	}
	kids, refusals := s.ReconcileRunsc(gen, container, p.View.Slots)
	if len(refusals) > 0 {
		return Recovery{Refusals: refusals}
	}
	return Recovery{Absent: append(absent, kids...)}
}
