package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
)

// runscSlots are the sandbox participant's slots for runsc's own children.
var runscSlots = []string{"runsc_sandbox", "runsc_gofer"}

// ReconcileRunsc proves the runsc sandbox and gofer of generation g gone and
// only then removes runsc's state for container. Nothing here signals a pid
// read from runsc's state file, and no runsc command is run (`runsc delete`
// SIGKILLs those pids, with or without -force).
//
//   - A recorded identity goes through PidfsRecoveryMatch (awaitAbsence): an
//     absent, foreign or other-boot process is proven gone, a matched one is
//     waited for and then stopped through the matched pidfd.
//   - A generation that never recorded them (earlier builds, or a crash
//     before SandboxReady) is checked only through the state file's pids as
//     locators after the boot fence: each must become free within the
//     recovery wait. A pid still held is never signalled — it may be the
//     sandbox or any process that reuses the number — and the generation is
//     refused, its runsc state kept, until the pid is free (a later start
//     retries) or the host reboots.
//
// It returns the recorded authorities proven absent, or the refusals.
func (s *Service) ReconcileRunsc(g uint64, container string, slots map[string]participant.Slot) ([]pidfs.Authority, []string) {
	var absent []pidfs.Authority
	var refusals []string
	unrecorded := false
	for _, name := range runscSlots {
		sl, ok := slots[name]
		switch {
		case !ok || sl.State == participant.Unassigned:
			unrecorded = true
		case sl.Legacy != nil:
			refusals = append(refusals, name+": legacy-unverified identity")
		default:
			if err := s.cfg.AwaitAbsence(sl.Identity); err != nil {
				refusals = append(refusals, fmt.Sprintf("%s %s: %v", name, sl.Identity, err))
				continue
			}
			absent = append(absent, sl.Identity.Authority)
		}
	}
	if len(refusals) > 0 {
		return nil, refusals
	}
	if unrecorded && container != "" {
		if r := s.unrecordedRunscGone(g, container); r != "" {
			return nil, []string{r}
		}
	}
	if container != "" {
		if err := runsc.RemoveState(s.cfg.Runtime.Root, container); err != nil {
			s.log.Warn("remove runsc state", "container", container, "err", err)
		}
	}
	return absent, nil
}

// unrecordedRunscGone checks runsc's state pids of a generation that never
// recorded its sandbox and gofer identities; it returns "" once they are
// free (or fenced by a reboot), else the refusal naming what is left.
func (s *Service) unrecordedRunscGone(g uint64, container string) string {
	var gen *store.Generation
	s.cfg.Store.View(func(tx *store.Tx) error {
		var err error
		gen, err = tx.Generation(g)
		return err
	})
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return "runsc sandbox/gofer identity never recorded and the boot id is unreadable: " + err.Error()
	}
	if gen != nil && gen.BootID != boot {
		return "" // every process of an earlier boot is gone; no pid is looked up
	}
	st, err := runsc.ReadState(s.cfg.Runtime.Root, container)
	if errors.Is(err, runsc.ErrNoState) {
		return "" // no runsc state: runsc stopped its children and removed it, or never created them
	}
	if err != nil {
		return fmt.Sprintf("runsc sandbox/gofer identity never recorded and runsc's state is unreadable (%v): left in %s", err, s.cfg.Runtime.Root)
	}
	held, err := pidfs.AwaitLocatorsGone([]int{st.SandboxPID, st.GoferPID}, s.cfg.RecoveryWait)
	if err != nil {
		return fmt.Sprintf("runsc sandbox/gofer identity never recorded and its pids cannot be checked: %v", err)
	}
	if len(held) == 0 {
		return ""
	}
	pids := make([]string, len(held))
	for i, p := range held {
		pids[i] = strconv.Itoa(p)
	}
	s.log.Error("runsc state names live processes whose identity was never recorded: not signalled, state kept",
		"recovered_generation", g, "container", container, "pids", strings.Join(pids, ","), "runsc_root", s.cfg.Runtime.Root)
	return fmt.Sprintf("runsc's state for container %s names live pid %s as its sandbox/gofer, whose pidfs identity was never recorded: "+
		"not signalled (the number may now be an unrelated process of yours); the runsc state in %s is kept. "+
		"If `ps -o pid,args -p %s` shows runsc-sandbox or runsc-gofer naming %s, stop it yourself; once the pid is free, the next `lazaret run` in this workspace cleans the record",
		container, strings.Join(pids, ", "), s.cfg.Runtime.Root, strings.Join(pids, ","), container)
}

// KeptRunscState lists the container IDs whose runsc state is still in the
// runtime directory: only ReconcileRunsc, after proving absence, removes it.
func KeptRunscState(runscRoot string) map[string]bool {
	keep := map[string]bool{}
	ids, _ := runsc.StateContainers(runscRoot)
	for _, id := range ids {
		keep[id] = true
	}
	return keep
}

// RemoveRuntimeExceptRunscState removes the runtime directory, except the
// runsc state files of containers not proven gone (kept for the next
// recovery: they name the pids it must check). It needs no Service: a
// coordinator whose init failed before the store opened runs it too.
func RemoveRuntimeExceptRunscState(log *slog.Logger, runtimeDir, root string) {
	keep := KeptRunscState(root)
	if len(keep) == 0 {
		os.RemoveAll(runtimeDir)
		return
	}
	ents, _ := os.ReadDir(runtimeDir)
	for _, e := range ents {
		if p := filepath.Join(runtimeDir, e.Name()); p != root {
			os.RemoveAll(p)
		}
	}
	ents, _ = os.ReadDir(root)
	for _, e := range ents {
		if !keptStateFile(e.Name(), keep) {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
	ids := make([]string, 0, len(keep))
	for id := range keep {
		ids = append(ids, id)
	}
	log.Warn("runsc state kept: its processes are not proven gone", "containers", strings.Join(ids, ","), "runsc_root", root)
}

// keptStateFile reports whether name is runsc state of a kept container.
func keptStateFile(name string, keep map[string]bool) bool {
	for id := range keep {
		if strings.HasPrefix(name, id+"_sandbox:") || name == "runsc-"+id+".sock" {
			return true
		}
	}
	return false
}

// RecoverStaleState removes runsc state a dead generation left, after
// every generation was recovered. runsc state is removed only for a
// container whose generation's sandbox is Clean (its processes were proven
// gone) or, with no record at all, once its pids are free
// (ReconcileRunsc); a retained generation's state is kept. A container of
// another Domain is never touched. No runsc command runs: `runsc delete`
// would SIGKILL the state file's pids. retained says whether recovery
// refused generation g; retain reports a new refusal.
func (s *Service) RecoverStaleState(retained func(g uint64) bool, retain func(g uint64, reason string)) {
	ids, _ := runsc.StateContainers(s.cfg.Runtime.Root)
	prefix := "lazaret-" + string(s.cfg.Domain) + "-"
	for _, id := range ids {
		gs, ok := strings.CutPrefix(id, prefix)
		g, err := strconv.ParseUint(gs, 10, 64)
		if !ok || err != nil {
			continue // not a container of this Domain: never ours to touch
		}
		var p *store.Participant
		s.cfg.Store.View(func(tx *store.Tx) error {
			p, _ = tx.Participant(g, participant.Sandbox)
			return nil
		})
		switch {
		case retained(g):
			// Recovery refused it: the state names what is left.
		case p != nil && p.Phase == participant.Clean:
			s.log.Warn("removing runsc state of a Clean generation", "container", id)
			if err := runsc.RemoveState(s.cfg.Runtime.Root, id); err != nil {
				s.log.Warn("remove runsc state", "container", id, "err", err)
			}
		default:
			if _, refusals := s.ReconcileRunsc(g, id, nil); len(refusals) > 0 {
				retain(g, joinRefusals(refusals))
			}
		}
	}
}

// RemoveRunscRootIfEmpty removes runsc's state directory once no state in
// it is kept.
func (s *Service) RemoveRunscRootIfEmpty() {
	if len(KeptRunscState(s.cfg.Runtime.Root)) == 0 {
		os.RemoveAll(s.cfg.Runtime.Root)
	}
}
