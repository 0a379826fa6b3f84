package hc

import (
	"errors"
	"fmt"
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

// reconcileRunsc proves the runsc sandbox and gofer of generation g gone and
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
func (c *coordinator) reconcileRunsc(g uint64, container string, slots map[string]participant.Slot) ([]pidfs.Authority, []string) {
	var absent []pidfs.Authority
	var refusals []string
	unrecorded := false
	for _, name := range runscSlots {
		s, ok := slots[name]
		switch {
		case !ok || s.State == participant.Unassigned:
			unrecorded = true
		case s.Legacy != nil:
			refusals = append(refusals, name+": legacy-unverified identity")
		default:
			if err := c.awaitAbsence(s.Identity); err != nil {
				refusals = append(refusals, fmt.Sprintf("%s %s: %v", name, s.Identity, err))
				continue
			}
			absent = append(absent, s.Identity.Authority)
		}
	}
	if len(refusals) > 0 {
		return nil, refusals
	}
	if unrecorded && container != "" {
		if r := c.unrecordedRunscGone(g, container); r != "" {
			return nil, []string{r}
		}
	}
	if container != "" {
		if err := runsc.RemoveState(c.rt.Root, container); err != nil {
			c.log.Warn("remove runsc state", "container", container, "err", err)
		}
	}
	return absent, nil
}

// unrecordedRunscGone checks runsc's state pids of a generation that never
// recorded its sandbox and gofer identities; it returns "" once they are
// free (or fenced by a reboot), else the refusal naming what is left.
func (c *coordinator) unrecordedRunscGone(g uint64, container string) string {
	var gen *store.Generation
	c.store.View(func(tx *store.Tx) error {
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
	st, err := runsc.ReadState(c.rt.Root, container)
	if errors.Is(err, runsc.ErrNoState) {
		return "" // no runsc state: runsc stopped its children and removed it, or never created them
	}
	if err != nil {
		return fmt.Sprintf("runsc sandbox/gofer identity never recorded and runsc's state is unreadable (%v): left in %s", err, c.rt.Root)
	}
	held, err := pidfs.AwaitLocatorsGone([]int{st.SandboxPID, st.GoferPID}, recoveryWait)
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
	c.log.Error("runsc state names live processes whose identity was never recorded: not signalled, state kept",
		"recovered_generation", g, "container", container, "pids", strings.Join(pids, ","), "runsc_root", c.rt.Root)
	return fmt.Sprintf("runsc's state for container %s names live pid %s as its sandbox/gofer, whose pidfs identity was never recorded: "+
		"not signalled (the number may now be an unrelated process of yours); the runsc state in %s is kept. "+
		"If `ps -o pid,args -p %s` shows runsc-sandbox or runsc-gofer naming %s, stop it yourself; once the pid is free, the next `lazaret run` in this workspace cleans the record",
		container, strings.Join(pids, ", "), c.rt.Root, strings.Join(pids, ","), container)
}

// keptRunscState lists the container IDs whose runsc state is still in the
// runtime directory: only reconcileRunsc, after proving absence, removes it.
func (c *coordinator) keptRunscState() map[string]bool {
	keep := map[string]bool{}
	ids, _ := runsc.StateContainers(c.paths.RunscRoot())
	for _, id := range ids {
		keep[id] = true
	}
	return keep
}

// removeRuntimeExceptRunscState removes the runtime directory, except the
// runsc state files of containers not proven gone (kept for the next
// recovery: they name the pids it must check).
func (c *coordinator) removeRuntimeExceptRunscState() {
	keep := c.keptRunscState()
	if len(keep) == 0 {
		os.RemoveAll(c.paths.RuntimeDir)
		return
	}
	root := c.paths.RunscRoot()
	ents, _ := os.ReadDir(c.paths.RuntimeDir)
	for _, e := range ents {
		if p := filepath.Join(c.paths.RuntimeDir, e.Name()); p != root {
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
	c.log.Warn("runsc state kept: its processes are not proven gone", "containers", strings.Join(ids, ","), "runsc_root", root)
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
