package network

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/slirp"
	"github.com/lazaret/lazaret/pkg/store"
)

func helperSnapshot(s *lv1.HelperSnapshotV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Helper{Helper: s}}
}

func networkSnapshot(s *lv1.NetworkSnapshotV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Network{Network: s}}
}

func unassignedSlot() *lv1.ProcessSlotV1 {
	return &lv1.ProcessSlotV1{State: &lv1.ProcessSlotV1_Unassigned{Unassigned: &lv1.UnassignedV1{}}}
}

// Launch begins the role once RS exists: the network's identity is fixed
// from RS's netns (Prepare; the returned channel delivers its outcome, which
// StartSandbox waits for), then the helper starts (Start; HelperReady
// delivers its outcome). The helper needs only RS's network namespace,
// which exists from the clone on (read through RS's pidfd).
func (s *Service) Launch(rs *proc.Child) <-chan error {
	prepared := make(chan error, 1)
	s.mu.Lock()
	s.launched = true
	s.mu.Unlock()
	go func() {
		defer close(s.started)
		dev, ino, err := rs.Handle().NetNamespace()
		if err == nil {
			err = s.Prepare(&lv1.NamespaceIdentity{Dev: dev, Ino: ino})
		}
		prepared <- err
		if err == nil {
			err = s.Start(rs)
		}
		s.helperErr = err // before started is closed
	}()
	return prepared
}

// HelperReady waits for the outcome of the helper's start (Launch); any
// number of callers may.
func (s *Service) HelperReady() error {
	<-s.started
	return s.helperErr
}

// Start commits the helper and network participants' Intent, then
// acquires slirp4netns through the causal broker joining RS's netns by
// RS's pid, and waits for its ready signal (the tap is configured).
func (s *Service) Start(rs *proc.Child) error {
	nsenter, err := locate.Find("nsenter", os.Getenv)
	if err != nil {
		return err
	}
	slirpPath, err := locate.Find("slirp4netns", os.Getenv)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("%w (install the slirp4netns package: `make setup` does)", err), errdefs.ErrUnsupportedHost)
	}
	self := s.cfg.LinkExe
	if self == "" {
		return errdefs.New(errdefs.ErrInternal, "no executable for the connectivity helper's mount-namespace link (%s)", slirp.RoleArg)
	}
	gen := s.cfg.Generation
	s.mu.Lock()
	netns, fp, addr, pol := s.netns, s.fingerprint, s.addr, s.policy
	s.mu.Unlock()
	policyDigest := pol.Digest()
	if err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := tx.PutParticipant(gen, participant.Helper, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(gen, participant.Network, participant.Intent, networkSnapshot(&lv1.NetworkSnapshotV1{
			Netns: netns, ReadinessFingerprint: fp[:], PolicyDigest: policyDigest[:], Supervisor: unassignedSlot(),
		}))
	}); err != nil {
		return err
	}
	exitR, exitW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		exitR.Close()
		exitW.Close()
		return err
	}
	defer readyR.Close()
	// The helper's output (slirp4netns's banner and messages, the link's
	// errors) becomes log records, not raw lines in the middle of the log.
	outR, outW, err := os.Pipe()
	if err != nil {
		exitR.Close()
		exitW.Close()
		readyW.Close()
		return err
	}
	rsPID := rs.Handle().PID() // the coordinator's unreaped child: the pid names it
	chain := slirp.Chain{Nsenter: nsenter, Self: self, Slirp: slirpPath, ResolvConf: filepath.Join(s.cfg.RuntimeDir, "etc", "helper-resolv.conf"),
		SupervisorPID: rsPID, Network: addr, ExitFD: 3, ReadyFD: 4, APISocket: APISocket(s.cfg.RuntimeDir)}
	child, err := s.cfg.Launcher.Acquire(context.Background(), proc.AcquireSpec{
		Slot: "helper",
		// The helper starts beside RS's start-up, on two cores: a wrapper
		// re-exec of lazaret-hc would take CPU from the critical path.
		ExecStop: true,
		Target: proc.Command{Path: nsenter, Args: chain.Argv(), Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/",
			Files: []*os.File{nil, outW, outW, exitR, readyW}},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			return s.cfg.Store.Update(func(tx *store.Tx) error {
				return tx.PutParticipant(gen, participant.Helper, participant.Intent, helperSnapshot(&lv1.HelperSnapshotV1{
					Netns: netns, Helper: store.StagedSlot(id), Supervisor: unassignedSlot(),
				}))
			})
		},
	})
	exitR.Close()
	readyW.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		exitW.Close()
		return fmt.Errorf("start the connectivity helper (slirp4netns): %w", err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		logHelperOutput(s.log, outR)
	}()
	s.mu.Lock()
	s.helper, s.exitW, s.helperOut = child, exitW, logged
	s.mu.Unlock()
	failpoint.Hit("lazaret-hc:helper-started")
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		n, err := readyR.Read(b)
		if n == 1 && b[0] == '1' {
			ready <- nil
			return
		}
		ready <- fmt.Errorf("ready signal %q: %v", b[:n], err)
	}()
	logPath := s.cfg.LogPath
	select {
	case err := <-ready:
		if err != nil {
			return errdefs.New(errdefs.ErrUnavailable, "the connectivity helper (slirp4netns) failed to configure the sandbox network (%v); its messages are in %s", err, logPath)
		}
	case <-child.Done():
		st, _ := child.Status()
		return errdefs.New(errdefs.ErrUnavailable, "the connectivity helper (slirp4netns) exited during start (%s); its messages are in %s", st, logPath)
	case <-time.After(helperReadyTimeout):
		return errdefs.New(errdefs.ErrUnavailable, "the connectivity helper (slirp4netns) was not ready within %s; see %s", helperReadyTimeout, logPath)
	}
	s.cfg.Watch(child, "the connectivity helper (slirp4netns) exited unexpectedly: the Domain stops")
	s.cfg.Timing.Mark("connectivity helper ready")
	s.log.Info("connectivity helper ready", "helper", child.Identity().String(), "tap", slirp.Tap, "cidr", addr.CIDR.String())
	return s.forwardProfilePorts()
}

// Judge judges the sandbox's readiness probe in SandboxReady r against
// the probe this generation's policy derived, after RS's routes were
// verified (VerifyReady), and reports its warnings to the starting
// sessions. Publication is refused (fail closed) unless the probe proves
// the policy; Commit then records the verdict.
func (s *Service) Judge(r *lv1.SandboxReady) error {
	s.mu.Lock()
	addr, probe, helper := s.addr, s.probe, s.helper
	s.mu.Unlock()
	if helper == nil {
		return errdefs.New(errdefs.ErrRefused, "no connectivity helper was started")
	}
	if tap, err := netip.ParsePrefix(r.ObservedTapAddress); err != nil || tap.Addr() != addr.Guest {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor observed tap address %q, not the connectivity helper's %s", r.ObservedTapAddress, addr.Guest)
	}
	if r.NetworkProbeReport == "" {
		return errdefs.New(errdefs.ErrRefused, "the sandbox reported no network readiness probe: refusing to publish (are lazaret-hc and lazaret-escalate from the same build?)")
	}
	rep, err := netprobe.ParseLine(r.NetworkProbeReport)
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrRefused)
	}
	s.log.Info("network readiness probe", "report", r.NetworkProbeReport)
	v := netprobe.Judge(probe, rep)
	s.mu.Lock()
	s.verdict = &v
	s.mu.Unlock()
	for _, w := range v.Warnings {
		s.log.Warn("network readiness", "warning", w)
		s.cfg.Progress(control.ProgressWarning + w)
	}
	if !v.Ready() {
		return errdefs.New(errdefs.ErrRefused, "network readiness not proven, refusing to publish the Domain: %s. Check the profile's network settings (`lazaret config check`) and %s", strings.Join(v.Problems, "; "), s.cfg.LogPath)
	}
	s.cfg.Timing.Mark("network readiness judged")
	return nil
}

// Commit runs in the coordinator's one transaction of the publication,
// tx, after Judge proved r's probe and after the sandbox participant is
// Committed there (RS is then the committed supervisor rsID): it commits
// the helper's exact staged identity with RS as its direct supervisor and,
// after it, the network participant with the readiness evidence.
func (s *Service) Commit(tx *store.Tx, r *lv1.SandboxReady, rsID pidfs.Identity) error {
	gen := s.cfg.Generation
	s.mu.Lock()
	netns, fp, pol, helper, v := s.netns, s.fingerprint, s.policy, s.helper, s.verdict
	s.mu.Unlock()
	if helper == nil || v == nil || !v.Ready() {
		return errdefs.New(errdefs.ErrRefused, "network readiness was not proven (Judge): refusing to publish")
	}
	if err := tx.PutParticipant(gen, participant.Helper, participant.Committed, helperSnapshot(&lv1.HelperSnapshotV1{
		Netns: netns, Helper: store.CommittedSlot(helper.Identity()), Supervisor: store.CommittedSlot(rsID),
	})); err != nil {
		return err
	}
	digest := pol.Digest()
	ev := &lv1.NetworkReadinessEvidenceV1{
		Generation: gen, ReadinessFingerprint: fp[:], PolicyDigest: digest[:], Netns: netns,
		Supervisor: store.IdentityProto(rsID), DenyObserved: v.DenyObserved, PermitObserved: v.PermitObserved, DnsObserved: v.DNSObserved,
		ObservedRoutes: r.ObservedRoutes,
	}
	if err := tx.PutParticipant(gen, participant.Network, participant.Committed, networkSnapshot(&lv1.NetworkSnapshotV1{
		Netns: netns, ReadinessFingerprint: fp[:], PolicyDigest: digest[:], Readiness: ev, Supervisor: store.CommittedSlot(rsID),
	})); err != nil {
		return err
	}
	s.log.Info("network ready", "readiness_fingerprint", hex.EncodeToString(fp[:]), "deny_observed", v.DenyObserved, "permit_observed", v.PermitObserved, "dns_observed", v.DNSObserved, "fail_fast", strings.Join(v.FailFast, "; "))
	return nil
}

// Release records ReleaseIntent for the network and helper participants
// (keeping identities) before their resources are stopped.
func (s *Service) Release() {
	if err := s.cfg.Store.Update(s.ReleaseTx); err != nil {
		s.log.Error("record release intent", "roles", "network, helper", "err", err)
	}
}

// ReleaseTx is Release within tx (the teardown records every release
// intent in one transaction).
func (s *Service) ReleaseTx(tx *store.Tx) error {
	for _, role := range []participant.Role{participant.Network, participant.Helper} {
		if _, err := tx.ReleaseHeld(s.cfg.Generation, role); err != nil {
			return fmt.Errorf("%s: %w", role, err)
		}
	}
	return nil
}

// BeginStop closes the exit-fd peer of a started helper without waiting:
// slirp4netns exits at once, but its process takes tens of milliseconds
// to end in the kernel (its sandbox's mount namespace goes with it: 31 ms
// from exit_group to the pidfd here), which the teardown spends stopping
// the Runtime Supervisor meanwhile. Stop waits for the exit. A helper
// whose start is still in flight is left to Stop.
func (s *Service) BeginStop() {
	if s.startInFlight(false) {
		return
	}
	s.closeExit()
}

// Stop ends the helper: closing the exit-fd peer (unless BeginStop did)
// makes slirp4netns exit; a helper that lingers is killed through its
// pidfd. A start in flight ends (bounded) first.
func (s *Service) Stop() {
	s.startInFlight(true)
	s.closeExit()
	s.mu.Lock()
	h := s.helper
	s.mu.Unlock()
	if h == nil {
		return
	}
	select {
	case <-h.Done():
	case <-time.After(helperStopWait):
		s.log.Error("connectivity helper did not exit on its exit fd: SIGKILL through its pidfd")
		h.Signal(unix.SIGKILL)
		<-h.Done()
	}
	// Its last lines (slirp4netns writes its buffered output at exit)
	// reach the log before the teardown goes on.
	s.mu.Lock()
	logged := s.helperOut
	s.mu.Unlock()
	if logged != nil {
		select {
		case <-logged:
		case <-time.After(helperOutputWait):
		}
	}
	failpoint.Hit("lazaret-hc:helper-stopped")
}

// startInFlight reports whether Launch ran and its start attempt has not
// ended; with wait it waits for that end first (and reports false).
func (s *Service) startInFlight(wait bool) bool {
	s.mu.Lock()
	launched := s.launched
	s.mu.Unlock()
	if !launched {
		return false
	}
	if wait {
		<-s.started
		return false
	}
	select {
	case <-s.started:
		return false
	default:
		return true
	}
}

// closeExit closes the exit-fd peer, once: the helper exits on it.
func (s *Service) closeExit() {
	s.mu.Lock()
	w := s.exitW
	s.exitW = nil
	s.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// Finish records the helper and network participants Clean after
// teardown: the helper was reaped by this coordinator, RS too (the netns,
// and with it every route, is gone with its last process).
func (s *Service) Finish(rs *proc.Child) {
	gen := s.cfg.Generation
	var rsGone []pidfs.Authority
	if rs != nil {
		select {
		case <-rs.Done():
			rsGone = append(rsGone, rs.Identity().Authority)
		default:
			s.log.Error("runtime supervisor not reaped: network stays in release intent")
			return
		}
	}
	if err := releaseAndClean(s.cfg.Store, gen, participant.Network, "normal teardown: runtime supervisor reaped, its network namespace is gone", rsGone); err != nil {
		s.log.Error("record network clean", "err", err)
	}
	helperGone := rsGone
	s.mu.Lock()
	h := s.helper
	s.mu.Unlock()
	if h != nil {
		select {
		case <-h.Done():
			helperGone = append(append([]pidfs.Authority(nil), rsGone...), h.Identity().Authority)
		default:
			s.log.Error("connectivity helper not reaped: helper stays in release intent")
			return
		}
	}
	if err := releaseAndClean(s.cfg.Store, gen, participant.Helper, "normal teardown: connectivity helper and runtime supervisor reaped", helperGone); err != nil {
		s.log.Error("record helper clean", "err", err)
	}
}

// Recover is bootstrap recovery of a dead generation g's helper and network
// participants: every recorded process (the helper; RS) is proven absent by
// absent (PidfsRecoveryMatch; a surviving helper is stopped through its
// matched pidfd), then both are recorded Clean. It returns refusals: a
// record it cannot read, a legacy identity, or one not proven absent,
// leaves the records as they are.
func Recover(st *store.Store, g uint64, absent func(pidfs.Identity) error) []string {
	var refusals []string
	for _, role := range []participant.Role{participant.Helper, participant.Network} {
		var p *store.Participant
		err := st.View(func(tx *store.Tx) error {
			var err error
			p, err = tx.Participant(g, role)
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			// A record this build cannot read (a newer build's, a
			// corrupt one) is not proof that nothing is left.
			return append(refusals, fmt.Sprintf("%s: %v", role, err))
		}
		if p.Phase == participant.Clean {
			continue
		}
		var gone []pidfs.Authority
		for _, name := range []string{"helper", "supervisor"} {
			s, ok := p.View.Slots[name]
			if !ok || s.State == participant.Unassigned {
				continue
			}
			if s.Legacy != nil {
				refusals = append(refusals, fmt.Sprintf("%s %s: legacy-unverified identity", role, name))
				continue
			}
			if err := absent(s.Identity); err != nil {
				refusals = append(refusals, fmt.Sprintf("%s %s %s: %v", role, name, s.Identity, err))
				continue
			}
			gone = append(gone, s.Identity.Authority)
		}
		if len(refusals) > 0 {
			return refusals
		}
		if err := releaseAndClean(st, g, role, "bootstrap recovery: recorded processes proven absent by PidfsRecoveryMatch", gone); err != nil {
			return []string{fmt.Sprintf("%s: %v", role, err)}
		}
	}
	return nil
}

// releaseAndClean records role's release and Clean with the exact absence
// proof (store.(*Tx).ReleaseAndClean).
func releaseAndClean(st *store.Store, gen uint64, role participant.Role, detail string, absent []pidfs.Authority) error {
	return st.Update(func(tx *store.Tx) error {
		return tx.ReleaseAndClean(gen, role, detail, absent)
	})
}

// helperOutputWait bounds the wait for the end of an exited helper's
// output (a process it left behind could hold the pipe open).
const helperOutputWait = time.Second

// logHelperOutput logs each line the connectivity helper writes until
// the pipe ends: slirp4netns's start-up banner and exit chatter at debug
// level (`lazaret logs --debug`), anything else (its errors, the link's)
// at info. A line longer than helperLineMax is cut.
func logHelperOutput(log *slog.Logger, r *os.File) {
	defer r.Close()
	emit := func(b []byte) {
		line := strings.TrimSpace(string(b))
		if line == "" {
			return
		}
		level := slog.LevelInfo
		if helperChatter(line) {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "connectivity helper output", "line", line)
	}
	br := bufio.NewReaderSize(r, 4096)
	var line []byte
	for {
		frag, more, err := br.ReadLine()
		if room := helperLineMax - len(line); room > 0 {
			line = append(line, frag[:min(len(frag), room)]...)
		}
		if err != nil {
			emit(line)
			return
		}
		if !more {
			emit(line)
			line = line[:0]
		}
	}
}

// helperLineMax bounds one line of the helper's output.
const helperLineMax = 16 << 10

// helperChatter reports whether line is slirp4netns's routine output: its
// banner, the seccomp notice and list, and its exit messages.
func helperChatter(line string) bool {
	for _, p := range []string{"Starting slirp", "* ", "WARNING: Support for seccomp is experimental", "seccomp: The following syscalls are blocked", "exitfd event", "do_slirp is exiting", "sent tapfd=", "received tapfd="} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}
