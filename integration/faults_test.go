package integration

import (
	"io"
	"log/slog"
	"os/exec"

	"golang.org/x/sys/unix"

	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/store"

	"github.com/lazaret/lazaret/pkg/failpoint"
)

// faultStages is the fault-injection matrix (spec §3.2 acquisition, §3.5
// publication and release, FR-7): every broker step for every acquired
// child (RS, attached runsc, session exec client, Git-routing daemon), the
// wrapper's own steps,
// and the coordinator's and supervisor's start-up, publication and
// teardown stages.
func faultStages() []string {
	var s []string
	// The slots acquired through the exec-stop barrier (proc.AcquireSpec
	// ExecStop) have no wrapper process, hence no wrapper stages: the
	// stopped target itself waits at the barrier.
	for _, slot := range []struct {
		proc, slot string
		wrapper    bool
	}{{"lazaret-hc", "rs", true}, {"lazaret-hc", "helper", false}, {"lazaret-rs", "attached_runsc", false}, {"lazaret-hc", "session_exec", false}, {"lazaret-rs", "git_routing", false}} {
		for _, step := range failpoint.AcquireSteps {
			s = append(s, slot.proc+":acquire:"+slot.slot+":"+step)
		}
		if !slot.wrapper {
			continue
		}
		for _, step := range failpoint.WrapperSteps {
			s = append(s, "wrapper:"+slot.slot+":"+step)
		}
	}
	for _, st := range []string{"started", "hello-verified", "helper-started", "lower-intent", "lease-acquired", "lease-held", "anchor-intent", "anchor-prepared",
		"staged-recorded", "first-session-held", "publication-committed", "published", "first-session-requested", "session-running", "teardown-begin", "anchor-release-intent", "rs-stopped", "helper-stopped", "anchor-clean", "lease-released"} {
		s = append(s, "lazaret-hc:"+st)
	}
	for _, st := range []string{"hello-sent", "prepared", "lease-recorded", "rootfs-mounted", "anchors-mounted", "git-routing-acquired", "git-routing-mounted", "runsc-ready", "kill-git-routing-after-ready", "git-routing-stopped", "kill-runsc-after-ready", "stop-requested", "sandbox-stopped", "deleted", "anchors-unmounted"} {
		s = append(s, "lazaret-rs:"+st)
	}
	return s
}

// ranMarker is the file a fault stage's session command writes in the
// workspace.
const ranMarker = "ran-by-the-session"

// beforePublication reports whether a fault stage comes before the
// Domain's publication, which no session command may precede.
func beforePublication(stage string) bool {
	for _, p := range []string{"lazaret-hc:acquire:rs:", "wrapper:rs:", "lazaret-hc:acquire:helper:", "lazaret-rs:acquire:attached_runsc:", "lazaret-rs:acquire:git_routing:"} {
		if strings.HasPrefix(stage, p) {
			return true
		}
	}
	switch stage {
	case "lazaret-hc:started", "lazaret-hc:hello-verified", "lazaret-hc:helper-started", "lazaret-hc:lower-intent", "lazaret-hc:lease-acquired",
		"lazaret-hc:lease-held", "lazaret-hc:anchor-intent", "lazaret-hc:anchor-prepared", "lazaret-hc:staged-recorded", "lazaret-hc:first-session-held", "lazaret-hc:publication-committed",
		"lazaret-rs:hello-sent", "lazaret-rs:prepared", "lazaret-rs:lease-recorded", "lazaret-rs:rootfs-mounted", "lazaret-rs:anchors-mounted",
		"lazaret-rs:git-routing-acquired", "lazaret-rs:git-routing-mounted", "lazaret-rs:runsc-ready":
		return true
	}
	return false
}

// TestFaultInjectionRecovery (FR-7, OR-6): for every stage, a run whose
// Lazaret process (or wrapper, or attached runsc) is SIGKILLed there leaves
// no process or mount behind, and the next `lazaret run` recovers and
// succeeds with nothing left afterwards.
//
// Each stage has its own workspace, hence its own Domain, and the stages
// run side by side (with each other and the other parallel scenarios).
// A freed mount namespace's nsfs inode may meanwhile be reused by another
// Domain's new namespace; the teardown's mount-absence proof tells them
// apart by the never-reused namespace ID (pidfs.NamespaceHolders), so a
// stage's recovery does not see a neighbour's processes as holders.
func TestFaultInjectionRecovery(t *testing.T) {
	parallel(t)
	e := needFailpoints(t)
	// The tiny image is prepared first, by a run nothing kills: a stage
	// that kills a Domain while its supervisor prepares the image would
	// leave the half-made stage to whichever Domain prepares it next, in
	// another scenario's model trace (each trace replays one Domain's
	// steps), depending only on which scenario ran first.
	if r := lz(t, workspace(t), nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("preparing the tiny image before the fault stages: %+v", r)
	}
	stages := faultStages()
	var (
		mu         sync.Mutex
		recoveries []time.Duration
	)
	// The stages' subtests run after this function returns; the summary
	// waits for all of them.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		sort.Slice(recoveries, func(i, j int) bool { return recoveries[i] < recoveries[j] })
		if len(recoveries) > 0 {
			t.Logf("%d stages; median recovering run %s (max %s)", len(stages), recoveries[len(recoveries)/2], recoveries[len(recoveries)-1])
		}
	})
	for _, stage := range stages {
		t.Run(strings.ReplaceAll(stage, ":", "_"), func(t *testing.T) {
			t.Parallel()
			ws := workspace(t)
			recordModelTrace(t) // the faulted run and the recovering one
			// A starting Domain's first non-interactive session is started
			// by the sandbox's init; a session exec client is acquired for
			// an interactive session (or a later one): the faulted run
			// of those stages, and of the interactive session's Running
			// record, has a terminal.
			env := []string{failpoint.Env + "=" + stage}
			var c *exec.Cmd
			errb := new(syncBuffer)
			if strings.Contains(stage, ":session_exec:") || stage == "lazaret-hc:session-running" {
				p := startOnPTY(t, e, ws, append(env, modelTraceEnv(ws)...), filepath.Join(e.binFP, "lazaret"), "run", "-p", "tiny", "--", "echo", "hi")
				go func() { io.Copy(errb, p.m) }()
				c = p.cmd
			} else {
				c = e.cmdWith(e.binFP, ws, env, "run", "-p", "tiny", "--", "sh", "-c", "echo hi > "+ranMarker)
				c.Stdout, c.Stderr = io.Discard, errb
				c.Start()
			}
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(90 * time.Second):
				c.Process.Kill()
				<-done
				t.Fatalf("faulted run did not end; output %q", errb.String())
			}
			noProcessesOrMounts(t)
			logs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
			hit := strings.Contains(errb.String(), "failpoint hit: "+stage)
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				if strings.Contains(string(b), "workspace="+ws) && strings.Contains(string(b), "failpoint hit: "+stage) {
					hit = true
				}
			}
			if !hit {
				t.Fatalf("stage %s was never reached (exit %d, stderr %q)", stage, c.ProcessState.ExitCode(), errb.String())
			}
			// The first session's command runs only once the Domain is
			// published (the init starts it at the coordinator's request,
			// sent after the publication): killed before that, it never
			// ran, or it would have left its file in the workspace.
			if _, err := os.Stat(filepath.Join(ws, ranMarker)); err == nil && beforePublication(stage) {
				t.Fatalf("killed at %s, before the Domain's publication, the session's command ran anyway (it wrote %s)", stage, ranMarker)
			}
			start := time.Now()
			r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "recovered")
			mu.Lock()
			recoveries = append(recoveries, time.Since(start))
			mu.Unlock()
			if r.code != 0 || r.stdout != "recovered\n" {
				t.Fatalf("run after a kill at %s: %+v", stage, r)
			}
			noLeftovers(t)
			allClean(t, ws, "tiny")
		})
	}
}

// allClean opens the stopped Domain's store (taking its lock, as a Host
// Coordinator would) and asserts that no participant of any generation is
// left outside Clean and nothing was retained.
// lockWhenFree takes the exclusive flock of the Domain lock file f as soon
// as nothing holds it, polling for at most within.
func lockWhenFree(f *os.File, within time.Duration) error {
	var err error
	waitUntil(within, 50*time.Millisecond, func() bool {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		return err == nil
	})
	return err
}

func allClean(t *testing.T, ws, profile string) {
	t.Helper()
	e := need(t)
	canon, _ := filepath.EvalSymlinks(ws)
	id := domain.DeriveID(profile, canon)
	root := filepath.Join(e.stateHome, "lazaret", "domains", string(id))
	lock, err := os.OpenFile(filepath.Join(root, "lifecycle.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	// A coordinator that is exiting may still hold the lock for a moment
	// after its process stopped looking alive (its files close last).
	if err := lockWhenFree(lock, 5*time.Second); err != nil {
		t.Fatalf("Domain still locked after 5s: %v", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	st, err := store.Open(root, lock, store.DomainIdentity{ID: id, Profile: profile, CanonicalWorkspace: canon}, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.View(func(tx *store.Tx) error {
		gens, err := tx.Generations()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gens {
			ps, _ := tx.Participants(g)
			for _, p := range ps {
				if p.Phase != participant.Clean {
					t.Errorf("generation %d: %s is %s, not Clean", g, p.Role, p.Phase)
				}
			}
		}
		return nil
	})
	// §3.5: every released prepared_lower's catalog lease is gone too.
	if cat, err := catalog.New(filepath.Join(e.stateHome, "lazaret"), catalog.Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
		var leases []catalog.Lease
		if err := cat.View(context.Background(), func(tx *catalog.Tx) error {
			var err error
			leases, err = tx.AllLeases()
			return err
		}); err != nil {
			t.Errorf("storage catalog: %v", err)
		}
		for _, l := range leases {
			if l.DomainID == id {
				t.Errorf("catalog lease %s/%d of artifact %s left behind", l.DomainID, l.Generation, l.ArtifactID)
			}
		}
		filepath.Walk(filepath.Join(e.stateHome, "lazaret", catalog.Dir), func(p string, _ os.FileInfo, _ error) error {
			os.Lchown(p, e.uid, e.gid)
			return nil
		})
	}
	// The store files belong to the developer: restore ownership after this
	// root-run check so the next coordinator can open them.
	filepath.Walk(filepath.Join(root, "store"), func(p string, _ os.FileInfo, _ error) error {
		os.Lchown(p, e.uid, e.gid)
		return nil
	})
}
