package rs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/ignoredstate"
	"github.com/lazaret/lazaret/pkg/ocilayout"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/removal"
)

// beforeMounts is what launch does while the coordinator records the
// prepared-lower lease, none of it a mount: the profile paths' directories
// and lock, the rootfs mount point, and the reset trash of the State
// Anchors and of the Ignored Workspace State, which only namespace root can
// delete (finishing interrupted resets).
func (s *supervisor) beforeMounts(rootfs string) error {
	st := s.start
	if !domain.ID(st.DomainId).Valid() {
		return errdefs.New(errdefs.ErrInvalid, "bad Domain ID %q", st.DomainId)
	}
	if err := s.prepareProfilePaths(); err != nil {
		return err
	}
	if err := s.prepareIgnoredBinds(); err != nil {
		return err
	}
	if err := os.MkdirAll(rootfs, 0o700); err != nil {
		return err
	}
	root := anchor.Root(st.StorageRoot, st.DomainId)
	if n, err := anchor.PurgeTrash(root, time.Now); err != nil {
		return err
	} else if n > 0 {
		s.log.Info("deleted reset State Anchor uppers", "count", n)
	}
	if n, err := ignoredstate.PurgeTrash(root, time.Now); err != nil {
		return err
	} else if n > 0 {
		s.log.Info("deleted reset Ignored Workspace State", "count", n)
	}
	return nil
}

// mountAnchors mounts one State Anchor overlay for every anchor bind of the
// spec RS is about to run (spec §3.5): the spec HC built names, for each
// persistent guest path, a source beneath <bundle>/anchors; RS mounts the
// overlay of that guest path of the read-only lower under the Domain's upper
// there, in its own mount namespace (after beforeMounts). The anchors are
// independent (distinct uppers, work directories and targets), so they are
// mounted at once, one goroutine each: the mounts are on the start's
// critical path, between the lease and runsc, when the other core is
// mostly idle. Every anchor mounted is recorded, in the spec's order, even
// when another failed, so that the failure path unmounts it.
func (s *supervisor) mountAnchors(lowerRoot string) error {
	st := s.start
	root := anchor.Root(st.StorageRoot, st.DomainId)
	dir := ocispec.AnchorSourceDir(st.BundleDir)
	var binds []specs.Mount
	for _, m := range s.spec.Mounts {
		if !strings.HasPrefix(m.Source, dir+"/") {
			continue
		}
		name, err := anchor.Name(m.Destination)
		if err != nil {
			return err
		}
		if m.Source != filepath.Join(dir, name) {
			return errdefs.New(errdefs.ErrRefused, "anchor bind %s → %s does not follow the anchor layout", m.Source, m.Destination)
		}
		binds = append(binds, m)
	}
	type mounted struct {
		id     anchor.MountIdentity
		notice *anchor.Notice
		err    error
	}
	results := make([]mounted, len(binds))
	var wg sync.WaitGroup
	for i, m := range binds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.id, r.notice, r.err = anchor.Mount(root, lowerRoot, m.Destination, m.Source, s.art.ID, time.Now)
		}()
	}
	wg.Wait()
	var failed error
	for _, r := range results {
		if r.err != nil {
			if failed == nil {
				failed = r.err
			}
			continue
		}
		id, notice := r.id, r.notice
		s.anchors = append(s.anchors, id)
		s.log.Info("State Anchor mounted", "guest_path", id.GuestPath, "mount_id", id.MountID, "mount_ns", id.MountNSIno)
		if notice != nil && notice.ImageChanged {
			s.progress("note: your changes under %s were made over another image version (%s); unmodified files now follow the current image (%s). If installed packages misbehave, run `lazaret state reset %s`", notice.GuestPath, notice.WrittenOver, s.art.ID, notice.GuestPath)
		}
	}
	if failed != nil {
		return failed
	}
	failpoint.Hit("lazaret-rs:anchors-mounted")
	// state_anchor = Prepared needs the exact identity of every mount.
	s.emit("MountStateAnchor")
	s.plEmit("MountAnchor")
	s.mt.mounted = true
	msg := &lv1.AnchorsMounted{PreparedArtifactId: s.art.ID, MountNamespace: s.mountNS}
	for _, id := range s.anchors {
		msg.Anchors = append(msg.Anchors, &lv1.AnchorMount{GuestPath: id.GuestPath, MountId: id.MountID, Target: id.Target, Upper: id.Upper})
	}
	return s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_AnchorsMounted{AnchorsMounted: msg}})
}

// requestLease and awaitLease are the RS side of §3.5 acquisition steps
// 1-4: requestLease names the held prepared lower to HC; awaitLease
// mounts nothing until HC answers that the catalog lease and
// prepared_lower LeaseHeld (and state_anchor Intent) are durable. Without a
// coordinator it mounts nothing and fails.
func (s *supervisor) requestLease() error {
	return s.nameLower(s.art, s.start.ImageRef, false)
}

// nameLower sends ArtifactReady for art, the prepared lower of imageRef
// RS holds; provisional when RS found it without the preparer and has not
// read the coordinator's verdict on it.
func (s *supervisor) nameLower(art prepared.Artifact, imageRef string, provisional bool) error {
	return s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Artifact{Artifact: &lv1.ArtifactReady{
		PreparedArtifactId: art.ID, ImageRef: imageRef, ManifestDigest: art.Source.ManifestDigest, Provisional: provisional}}})
}

// awaitLease waits for requestLease's answer.
func (s *supervisor) awaitLease() error {
	select {
	case l := <-s.leases:
		if l.PreparedArtifactId != s.art.ID {
			return errdefs.New(errdefs.ErrRefused, "the coordinator recorded a lease of %q, not of the held artifact %q", l.PreparedArtifactId, s.art.ID)
		}
		failpoint.Hit("lazaret-rs:lease-recorded")
		return nil
	case <-s.hcGone:
		return errdefs.New(errdefs.ErrUnavailable, "host coordinator gone before recording the prepared-lower lease")
	case <-s.stop:
		return errdefs.New(errdefs.ErrUnavailable, "stop requested before the prepared-lower lease was recorded")
	case <-time.After(60 * time.Second):
		return errdefs.New(errdefs.ErrUnavailable, "no LeaseRecorded from the coordinator within 60s")
	}
}

// unmountAnchors detaches the host-side binds (some lie in the /etc
// anchor), then verifies and unmounts each recorded anchor mount (reverse
// order); a mismatch is logged and the mount left alone (it dies with RS's
// mount namespace).
func (s *supervisor) unmountAnchors() {
	s.unmakeHostBinds()
	for i := len(s.anchors) - 1; i >= 0; i-- {
		id := s.anchors[i]
		if err := anchor.Unmount(id); err != nil {
			s.log.Error("State Anchor not unmounted", "guest_path", id.GuestPath, "mount_id", id.MountID, "err", err)
			continue
		}
		s.log.Info("State Anchor unmounted", "guest_path", id.GuestPath, "mount_id", id.MountID)
		s.unmounted = append(s.unmounted, id.MountID)
	}
	if s.mt.mounted && len(s.anchors) == len(s.unmounted) {
		select {
		case <-s.stop:
			// Released by the coordinator (not a lease-loss teardown,
			// which RS records as it exits).
			s.plEmit("UnmountAnchor")
		default:
		}
	}
	s.anchors = nil
	failpoint.Hit("lazaret-rs:anchors-unmounted")
}

// lowerInputs name the prepared lower RS holds: known from its credential
// (before StartSandbox) and checked against StartSandbox.
type lowerInputs struct {
	storageRoot, imageRef, domainID string
	generation                      uint64
}

// heldLower is the outcome of a hold begun before StartSandbox.
type heldLower struct {
	in   lowerInputs
	done chan struct{}
	art  prepared.Artifact
	// found: art is the image's tree, found and held without the
	// preparer; StartSandbox says whether the Storage Catalog lets the
	// start reuse it as it is (resolveLower).
	found bool
	// named: RS named art to the coordinator as soon as it held it
	// (ArtifactReady, provisional when found).
	named bool
	err   error
}

// holdLowerEarly begins holdLower for in while the coordinator verifies
// the hello and builds StartSandbox; launch joins it (joinLower). The
// held artifact is named to the coordinator at once (ArtifactReady), so
// that its lease is recorded while StartSandbox travels and RS checks it:
// a tree found without the preparer is named provisional, and HC leases
// it only if the Storage Catalog's verdict names it (the verdict
// StartSandbox brings RS, which otherwise prepares and names the result).
func (s *supervisor) holdLowerEarly(in lowerInputs) {
	h := &heldLower{in: in, done: make(chan struct{})}
	s.held = h
	go func() {
		defer close(h.done)
		h.art, h.found, h.err = s.holdLower(in, false)
		if h.err != nil {
			return
		}
		s.timing.Mark("prepared lower held early")
		h.named = s.nameLower(h.art, in.imageRef, h.found) == nil
	}()
}

// joinLower returns the lower held for StartSandbox st — the early hold if
// it names the same lower (refusing one that does not), else a hold now;
// then resolveLower — and whether the coordinator was already told it.
func (s *supervisor) joinLower(st *lv1.StartSandbox) (art prepared.Artifact, named bool, err error) {
	want := lowerInputs{storageRoot: st.StorageRoot, imageRef: st.ImageRef, domainID: st.DomainId, generation: st.Generation}
	h := s.held
	if h == nil {
		h = &heldLower{in: want}
		h.art, h.found, h.err = s.holdLower(want, false)
	} else {
		<-h.done
	}
	if h.err != nil {
		return prepared.Artifact{}, false, h.err
	}
	if h.in != want {
		return prepared.Artifact{}, false, errdefs.New(errdefs.ErrRefused, "StartSandbox names the prepared lower of %+v, but the coordinator's credential named %+v", want, h.in)
	}
	verdict := st.GetReusableArtifactId()
	if art, err = s.resolveLower(want, h.art, h.found, verdict); err != nil {
		return prepared.Artifact{}, false, err
	}
	// The coordinator leases what RS named early when it was prepared
	// (not provisional) or when the verdict names it, the condition on
	// which resolveLower kept it.
	return art, h.named && (!h.found || verdict == h.art.ID), nil
}

// resolveLower settles a tree found without the preparer against the
// coordinator's verdict (StartSandbox.reusable_artifact_id: the artifact
// the Storage Catalog records Published for the image): the same artifact
// is reused as it is; otherwise (no record, a preparation, a reclamation a
// crash left unsettled) the hold is dropped and the preparer settles it
// under the artifact's preparation lock, as when no tree was found. The
// coordinator's lease checks Published again under the catalog's lock
// before anything is mounted.
func (s *supervisor) resolveLower(in lowerInputs, art prepared.Artifact, found bool, verdict string) (prepared.Artifact, error) {
	if !found {
		return art, nil // the preparer's
	}
	if verdict == art.ID {
		s.log.Info("reusing prepared lower", "image_ref", in.imageRef, "artifact_id", art.ID, "manifest_digest", art.Source.ManifestDigest)
		s.progress("prepare: reusing %s for %s", art.ID, in.imageRef)
		return art, nil
	}
	s.log.Info("the Storage Catalog does not record the prepared lower Published; running the preparer", "image_ref", in.imageRef, "artifact_id", art.ID, "coordinator_verdict", verdict)
	s.lowerUse.Release()
	s.lowerUse = nil
	art, _, err := s.holdLower(in, true)
	return art, err
}

// holdLower looks up (or, with prepare or when none is found, prepares)
// the prepared lower and holds it for RS's lifetime, so `lazaret gc`
// cannot reclaim it while the sandbox runs; an artifact reclaimed between
// lookup and hold is looked up (or prepared) again. found reports a tree
// found without the preparer. Reclaimed trees are deleted here, in the
// user namespace, in the background.
func (s *supervisor) holdLower(in lowerInputs, prepare bool) (art prepared.Artifact, found bool, err error) {
	for attempt := 0; ; attempt++ {
		art, found, err = s.ensureLower(in, prepare)
		if err != nil {
			return prepared.Artifact{}, false, err
		}
		use, err := prepared.Hold(in.storageRoot, art.ID)
		if errors.Is(err, prepared.ErrGone) && attempt < 3 {
			continue
		}
		if err != nil {
			return prepared.Artifact{}, false, err
		}
		s.lowerUse = use
		if s.purged == nil {
			s.startPurge(in.storageRoot)
		}
		return art, found, nil
	}
}

// ensureLower returns the prepared lower of in. Unless prepare is set, a
// valid tree of the image's manifest (a local layout's, or a pinned
// registry digest's: ocilayout.ReuseDigest) is returned as found, without
// the image library or the Storage Catalog (whether it may be reused as it
// is comes with StartSandbox: resolveLower); anything else — no such
// tree, a registry reference, a layout this check does not resolve — is
// the preparer's (runPreparer), which reuses what it can and prepares the
// rest once across concurrent Domains, recording every step in the
// Storage Catalog.
func (s *supervisor) ensureLower(in lowerInputs, prepare bool) (prepared.Artifact, bool, error) {
	if !prepare {
		d, err := ocilayout.ReuseDigest(in.imageRef)
		if err != nil {
			s.log.Debug("the preparer resolves the image", "image_ref", in.imageRef, "why", err)
		} else if art, found, err := prepared.LookupDigest(in.storageRoot, prepared.ArtifactID(d), d); err == nil && found {
			return art, true, nil
		} else {
			s.log.Debug("no prepared lower to reuse; running the preparer", "image_ref", in.imageRef, "manifest_digest", d, "err", err)
		}
	}
	art, err := s.runPreparer(in)
	return art, false, err
}

// runPreparer runs the preparer role of lazaret-cli (s.preparerExe) in
// RS's namespaces for in, relays its progress to the coordinator, and
// returns the artifact it reports, validated here. The child dies with RS
// (the broker's parent-death edge), so a prepare intent naming it is
// settled by the next preparer or gc once RS is gone.
func (s *supervisor) runPreparer(in lowerInputs) (prepared.Artifact, error) {
	// No fallback: this binary does not link the image library.
	exe := rolesExecutable("preparer-exe", s.preparerExe, "", s.log)
	if exe == "" {
		return prepared.Artifact{}, errdefs.New(errdefs.ErrUnsupportedHost,
			"prepare %s: no preparer: the coordinator named no lazaret-cli executable this supervisor can run (hc.log says why); reinstall Lazaret so that lazaret-cli is beside lazaret-hc", in.imageRef)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return prepared.Artifact{}, err
	}
	defer outR.Close()
	resR, resW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return prepared.Artifact{}, err
	}
	defer resR.Close()
	args := []string{exe, prepared.PreparerArg, "--storage-root=" + in.storageRoot, "--image=" + in.imageRef,
		"--domain=" + in.domainID, fmt.Sprintf("--generation=%d", in.generation), "--log-level=" + s.logLevel()}
	child, err := s.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "preparer",
		ExecStop: true,
		// RS's environment, as when RS prepared in-process: the model
		// trace, failpoints, the registry credentials' HOME.
		Target: proc.Command{Path: exe, Args: args, Env: os.Environ(), Dir: "/", Files: []*os.File{nil, outW, os.Stderr, resW}},
	})
	outW.Close()
	resW.Close()
	if err != nil {
		return prepared.Artifact{}, fmt.Errorf("prepare %s: start the preparer %s: %w", in.imageRef, exe, err)
	}
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				s.progress("%s", line)
				// Tests: the supervisor dies while its preparer works.
				failpoint.Hit("lazaret-rs:preparer-progress")
			}
		}
	}()
	id, digest, rerr := prepared.ReadPreparerResult(resR)
	<-child.Done()
	<-relayed
	st, werr := child.Status()
	switch {
	case werr != nil:
		return prepared.Artifact{}, fmt.Errorf("prepare %s: the preparer: %w", in.imageRef, werr)
	case rerr != nil && (!st.Exited || st.Code != 1):
		// No result of its own: it was killed or crashed.
		return prepared.Artifact{}, errdefs.New(errdefs.ErrUnavailable, "prepare %s: the preparer (pid %d) %s before it finished (the Domain log has its lines); the next start settles what it left",
			in.imageRef, child.Identity().HostPID, st)
	case rerr != nil:
		return prepared.Artifact{}, rerr
	case !st.Exited || st.Code != 0:
		return prepared.Artifact{}, errdefs.New(errdefs.ErrInternal, "prepare %s: the preparer reported %s but %s", in.imageRef, id, st)
	}
	art, found, err := prepared.LookupDigest(in.storageRoot, id, digest)
	if err != nil {
		return prepared.Artifact{}, err
	}
	if !found {
		return prepared.Artifact{}, fmt.Errorf("prepare %s: the preparer reported %s, which is not in the Storage Root: %w", in.imageRef, id, prepared.ErrGone)
	}
	return art, nil
}

// startPurge deletes the trash of storageRoot in the background, until
// awaitPurge stops it.
func (s *supervisor) startPurge(storageRoot string) {
	s.purged = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	s.stopPurge = cancel
	go func() {
		defer close(s.purged)
		s.purgeTrash(ctx, storageRoot)
	}()
}

// purgeTrash deletes the reclaimed prepared trees and what an interrupted
// `lazaret rm` moved aside, until ctx is cancelled at RS's exit.
func (s *supervisor) purgeTrash(ctx context.Context, storageRoot string) {
	n, err := prepared.PurgeTrash(ctx, storageRoot)
	switch {
	case errors.Is(err, context.Canceled):
		s.log.Info("deletion of reclaimed prepared artifacts stopped at exit; the next start continues", "count", n)
		return
	case err != nil:
		s.log.Warn("deleting reclaimed prepared artifacts", "err", err)
	case n > 0:
		s.log.Info("deleted reclaimed prepared artifacts", "count", n)
	}
	// What an interrupted `lazaret rm` moved aside (Domain Roots, prepared
	// trees, the catalog): only namespace root can delete its
	// subordinate-id files.
	n, err = removal.PurgeTrash(ctx, storageRoot, os.Getuid())
	switch {
	case errors.Is(err, context.Canceled):
		s.log.Info("deletion of what lazaret rm moved aside stopped at exit; the next start continues", "count", n)
	case err != nil:
		s.log.Warn("deleting what lazaret rm moved aside", "err", err)
	case n > 0:
		s.log.Info("deleted what an interrupted lazaret rm moved aside", "count", n)
	}
}

// purgeStopBound bounds how long RS's exit waits for the background
// deletion, once cancelled, to finish the directory entry in progress.
const purgeStopBound = 2 * time.Second

// awaitPurge stops the background deletion of reclaimed artifacts at RS's
// exit: the Domain's teardown (its lock, the next run in the workspace)
// never waits for garbage. The deletion stops before its next directory
// entry; what it deleted stays deleted, the rest stays in the trash for the
// next start (or `lazaret gc`, `lazaret rm`).
func (s *supervisor) awaitPurge() {
	if s.purged == nil {
		return
	}
	s.stopPurge()
	select {
	case <-s.purged:
	case <-time.After(purgeStopBound):
		s.log.Warn("deletion of reclaimed trees did not stop in time at exit; the next start continues", "bound", purgeStopBound)
	}
}
