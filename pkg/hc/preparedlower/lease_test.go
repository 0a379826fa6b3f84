package preparedlower

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/store"
)

// silence is how long a refused step is watched for a stray answer.
const silence = 50 * time.Millisecond

// TestAcquisitionOrder drives one generation through the fake supervisor:
// ArtifactReady leaves prepared_lower Intent, then the exact catalog
// lease, then LeaseHeld with RS's slot Committed and state_anchor Intent
// in one transaction, and only then is LeaseRecorded sent; AnchorsMounted
// for the wrong namespace, a reused inode or a missing path is refused
// and unanswered; the right one records Prepared. Once teardown began, no
// acquisition step is taken.
func TestAcquisitionOrder(t *testing.T) {
	f := newFixture(t)
	sup := supervisortest.New(t)
	s := f.service(sup)
	f.begin(s, 1)
	hello := &lv1.SupervisorHello{MountNamespace: f.held}
	sup.ArtifactReady(f.ready())
	if err := deliver(t, s, sup, hello); err != nil {
		t.Fatal(err)
	}
	sup.ExpectLeaseRecorded(f.art)
	f.wantPhases(1, participant.LeaseHeld, participant.Intent)
	if !f.leased(1) {
		t.Fatal("no catalog lease after LeaseRecorded")
	}
	if err := f.st.View(func(tx *store.Tx) error {
		p, err := tx.Participant(1, participant.Sandbox)
		if err != nil {
			return err
		}
		if sl, _ := store.SlotFromProto(p.Snapshot.GetSandbox().GetSupervisor()); sl.State != participant.CommittedSlot || sl.Identity != f.rs {
			return fmt.Errorf("sandbox supervisor slot after the lease is %s, want Committed(%s)", sl, f.rs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.wantActions(1, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")

	good := f.mounted(f.held)
	otherID := f.ownID + 1
	for name, m := range map[string]*lv1.AnchorsMounted{
		"another namespace":  {PreparedArtifactId: f.art, MountNamespace: &lv1.NamespaceIdentity{Dev: f.held.Dev, Ino: f.held.Ino + 1}, Anchors: good.Anchors},
		"a reused inode":     {PreparedArtifactId: f.art, MountNamespace: &lv1.NamespaceIdentity{Dev: f.held.Dev, Ino: f.held.Ino, MntnsId: &otherID}, Anchors: good.Anchors},
		"a missing path":     {PreparedArtifactId: f.art, MountNamespace: f.held, Anchors: good.Anchors[1:]},
		"another artifact":   {PreparedArtifactId: prepared.ArtifactID("sha256:" + strings.Repeat("12", 32)), MountNamespace: f.held, Anchors: good.Anchors},
		"a mount without ID": {PreparedArtifactId: f.art, MountNamespace: f.held, Anchors: append([]*lv1.AnchorMount{{GuestPath: f.paths[0]}}, good.Anchors[1:]...)},
	} {
		sup.AnchorsMounted(m)
		if err := deliver(t, s, sup, hello); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("anchors mounted in %s: %v", name, err)
		}
	}
	sup.ExpectSilence(silence)
	f.wantPhases(1, participant.LeaseHeld, participant.Intent)
	sup.AnchorsMounted(good)
	if err := deliver(t, s, sup, hello); err != nil {
		t.Fatal(err)
	}
	f.wantPhases(1, participant.LeaseHeld, participant.Prepared)

	// Teardown began: a late (or replayed) report takes no step.
	s.BeginRelease()
	sup.ArtifactReady(f.ready())
	if err := deliver(t, s, sup, hello); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("ArtifactReady after BeginRelease: %v", err)
	}
	sup.AnchorsMounted(good)
	if err := deliver(t, s, sup, hello); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("AnchorsMounted after BeginRelease: %v", err)
	}
	sup.ExpectSilence(silence)
	f.wantActions(1, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent", "CommitAnchorPrepared", "BeginRelease")
}

// TestAcquisitionRefusals: HC never trusts RS. An artifact no preparer
// recorded, a manifest the preparer did not record, another image or a
// malformed ID is not leased and LeaseRecorded is never sent; a refusal
// after the lease (a hello without a mount namespace) leaves the durable
// intent recovery releases.
func TestAcquisitionRefusals(t *testing.T) {
	f := newFixture(t)
	sup := supervisortest.New(t)
	hello := &lv1.SupervisorHello{MountNamespace: f.held}
	unrecorded := "sha256:" + strings.Repeat("cd", 32)
	plantArtifact(t, f.storage, prepared.ArtifactID(unrecorded), unrecorded)
	for i, c := range []struct {
		name  string
		ready *lv1.ArtifactReady
		pl    participant.Phase
		want  string
	}{
		{"an unrecorded artifact", &lv1.ArtifactReady{PreparedArtifactId: prepared.ArtifactID(unrecorded), ImageRef: f.image, ManifestDigest: unrecorded}, participant.Intent, "not recorded"},
		{"another manifest", &lv1.ArtifactReady{PreparedArtifactId: f.art, ImageRef: f.image, ManifestDigest: unrecorded}, participant.Intent, "its preparer recorded"},
		{"another image", &lv1.ArtifactReady{PreparedArtifactId: f.art, ImageRef: "docker.io/library/debian:12", ManifestDigest: f.md}, "", "not the configured"},
		{"a malformed ID", &lv1.ArtifactReady{PreparedArtifactId: "../x", ImageRef: f.image, ManifestDigest: f.md}, "", "not a prepared-artifact ID"},
	} {
		gen := uint64(10 + i)
		s := f.service(sup)
		f.begin(s, gen)
		sup.ArtifactReady(c.ready)
		if err := deliver(t, s, sup, hello); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v", c.name, err)
		}
		sup.ExpectSilence(silence)
		f.wantPhases(gen, c.pl, "")
		if f.leased(gen) {
			t.Fatalf("%s: leased", c.name)
		}
	}
	s := f.service(sup)
	f.begin(s, 20)
	sup.ArtifactReady(f.ready())
	if err := deliver(t, s, sup, &lv1.SupervisorHello{}); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "no mount namespace") {
		t.Fatalf("hello without a mount namespace: %v", err)
	}
	sup.ExpectSilence(silence)
	f.wantPhases(20, participant.Intent, "")
	if !f.leased(20) {
		t.Fatal("the lease taken before the refusal is not in the catalog")
	}
}

// TestLeaseAhead: with the image's prepared artifact Published and
// verified, LeaseAhead returns it as the verdict and takes acquisition
// steps 1 and 2 before RS names it (prepared_lower Intent, then the exact
// catalog lease); RS's ArtifactReady for it then takes only step 3 and is
// answered. An artifact other than the one leased ahead, or the same with
// another manifest, is refused unanswered, the lease kept for the
// release. An artifact that is not Published gets no verdict and no step;
// a generation whose teardown began takes none.
func TestLeaseAhead(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.image = "docker://docker.io/library/busybox@" + f.md // ReuseDigest reads the pinned digest
	sup := supervisortest.New(t)
	hello := &lv1.SupervisorHello{MountNamespace: f.held}

	s := f.service(sup)
	f.begin(s, 1)
	if v := s.LeaseAhead(ctx)(); v != f.art {
		t.Fatalf("verdict %q, want %s", v, f.art)
	}
	s.aheadState()
	f.wantPhases(1, participant.Intent, "")
	if !f.leased(1) {
		t.Fatal("no catalog lease taken ahead")
	}
	f.wantActions(1, "AcquireLeaseIntent", "InsertLease")
	sup.ArtifactReady(f.ready())
	if err := deliver(t, s, sup, hello); err != nil {
		t.Fatal(err)
	}
	sup.ExpectLeaseRecorded(f.art)
	f.wantPhases(1, participant.LeaseHeld, participant.Intent)
	f.wantActions(1, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")

	other := "sha256:" + strings.Repeat("cd", 32)
	plantArtifact(t, f.storage, prepared.ArtifactID(other), other)
	recordPrepared(t, f.cat, prepared.ArtifactID(other), other)
	s = f.service(sup)
	f.begin(s, 2)
	s.LeaseAhead(ctx)()
	for name, r := range map[string]*lv1.ArtifactReady{
		"another artifact": {PreparedArtifactId: prepared.ArtifactID(other), ImageRef: f.image, ManifestDigest: other},
		"another manifest": {PreparedArtifactId: f.art, ImageRef: f.image, ManifestDigest: other},
	} {
		sup.ArtifactReady(r)
		if err := deliver(t, s, sup, hello); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "the image changed") {
			t.Fatalf("%s after the lease ahead: %v", name, err)
		}
	}
	sup.ExpectSilence(silence)
	f.wantPhases(2, participant.Intent, "")
	if !f.leased(2) {
		t.Fatal("the lease taken ahead is gone after the refusals")
	}
	f.wantActions(2, "AcquireLeaseIntent", "InsertLease")
	// The failed start's teardown releases the lease taken ahead.
	s.BeginRelease()
	s.Clean(nil)
	f.wantPhases(2, participant.Clean, "")
	if f.leased(2) {
		t.Fatal("the lease taken ahead is left after the teardown")
	}
	f.wantActions(2, "AcquireLeaseIntent", "InsertLease", "BeginRelease", "ReleaseUnanchoredLower", "RemoveLease", "LowerClean")

	pinned := f.image
	f.image = "docker://docker.io/library/busybox@sha256:" + strings.Repeat("99", 32)
	s = f.service(sup)
	f.begin(s, 3)
	if v := s.LeaseAhead(ctx)(); v != "" {
		t.Fatalf("verdict %q for an artifact the catalog does not record", v)
	}
	s.aheadState()
	f.wantPhases(3, "", "")
	f.wantActions(3)
	f.image = pinned

	s = f.service(sup)
	f.begin(s, 4)
	s.BeginRelease()
	if v := s.LeaseAhead(ctx)(); v != f.art {
		t.Fatalf("verdict %q once teardown began, want %s", v, f.art)
	}
	s.aheadState()
	f.wantPhases(4, "", "")
	if f.leased(4) {
		t.Fatal("leased ahead once teardown began")
	}
}

// acquire takes generation gen through acquisition with its anchors
// mounted in ns, as a coordinator with a fake supervisor does.
func (f *fixture) acquire(gen uint64, ns *lv1.NamespaceIdentity) (*Service, *supervisortest.Supervisor, *lv1.AnchorsMounted) {
	f.t.Helper()
	sup := supervisortest.New(f.t)
	s := f.service(sup)
	f.begin(s, gen)
	hello := &lv1.SupervisorHello{MountNamespace: ns}
	sup.ArtifactReady(f.ready())
	if err := deliver(f.t, s, sup, hello); err != nil {
		f.t.Fatal(err)
	}
	sup.ExpectLeaseRecorded(f.art)
	m := f.mounted(ns)
	sup.AnchorsMounted(m)
	if err := deliver(f.t, s, sup, hello); err != nil {
		f.t.Fatal(err)
	}
	return s, sup, m
}

// TestReleaseWithProof: teardown records state_anchor ReleaseIntent before
// RS stops; once RS reported the anchors unmounted and was reaped, Clean
// releases only what is proven. A mount namespace still held (here: this
// process's) keeps every record and the lease, whatever RS reported, and
// gc cannot reclaim the leased artifact; a freed namespace, or one whose
// nsfs inode the kernel handed to a younger namespace, proves the mounts
// absent: state_anchor and prepared_lower become Clean, exactly this
// generation's lease is removed, and the generation finishes.
func TestReleaseWithProof(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	otherID := f.ownID + 1<<40
	for _, c := range []struct {
		name   string
		gen    uint64
		ns     *lv1.NamespaceIdentity
		proven bool
	}{
		{"held", 1, f.held, false},
		{"freed", 2, f.gone(), true},
		{"inode reused", 3, &lv1.NamespaceIdentity{Dev: f.held.Dev, Ino: f.held.Ino, MntnsId: &otherID}, true},
	} {
		s, sup, m := f.acquire(c.gen, c.ns)
		s.BeginRelease()
		if released, err := s.Release(); err != nil || !released {
			t.Fatalf("%s: release intent %v %v", c.name, released, err)
		}
		f.wantPhases(c.gen, participant.LeaseHeld, participant.ReleaseIntent)
		sup.Stopped(mountIDs(m)...)
		if err := deliver(t, s, sup, &lv1.SupervisorHello{MountNamespace: c.ns}); err != nil {
			t.Fatal(err)
		}
		s.SupervisorGone(true)
		s.Clean(nil)
		s.Finish()
		if !c.proven {
			f.wantPhases(c.gen, participant.LeaseHeld, participant.ReleaseIntent)
			if !f.leased(c.gen) || !f.live(c.gen) {
				t.Fatalf("%s: lease or records dropped without proof", c.name)
			}
			if err := f.cat.BeginReclaim(ctx, f.art, f.art+".gc"); !errors.Is(err, errdefs.ErrRefused) {
				t.Fatalf("gc reclaim of a leased artifact: %v", err)
			}
			f.wantActions(c.gen, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent", "CommitAnchorPrepared", "BeginRelease", "AnchorReleaseIntent")
			continue
		}
		f.wantPhases(c.gen, participant.Clean, participant.Clean)
		if f.leased(c.gen) || f.live(c.gen) {
			t.Fatalf("%s: lease or records left after the proven release", c.name)
		}
		f.wantActions(c.gen, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent", "CommitAnchorPrepared",
			"BeginRelease", "AnchorReleaseIntent", "AnchorClean", "RemoveLease", "LowerClean", "FinishGeneration")
	}
	if !f.leased(1) {
		t.Fatal("releasing later generations removed generation 1's lease")
	}
	// A second release intent is idempotent and records nothing.
	s := f.service(nil)
	s.Begin(2)
	if released, err := s.Release(); err != nil || released {
		t.Fatalf("release intent of a Clean anchor: %v %v", released, err)
	}
}

// TestRecoverDurableStates: a coordinator that died at any durable step of
// acquisition or release leaves records the next coordinator's bootstrap
// recovery (Recover, with no RS) releases once the mounts are proven
// absent, removing exactly the lease, or keeps — with the reason — when
// the proof is missing or the records contradict the catalog.
func TestRecoverDurableStates(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	unrecorded := "sha256:" + strings.Repeat("cd", 32)
	plantArtifact(t, f.storage, prepared.ArtifactID(unrecorded), unrecorded)
	// crashed leaves generation gen as a coordinator that died after the
	// named step would.
	crashed := map[string]func(gen uint64){
		"lower intent": func(gen uint64) {
			sup := supervisortest.New(t)
			s := f.service(sup)
			f.begin(s, gen)
			sup.ArtifactReady(f.ready())
			s.cfg.StorageRoot = t.TempDir() // the catalog cannot be opened: the step after the intent fails
			if err := deliver(t, s, sup, &lv1.SupervisorHello{MountNamespace: f.gone()}); err == nil {
				t.Fatal("acquisition without a Storage Catalog succeeded")
			}
		},
		"lease inserted": func(gen uint64) {
			sup := supervisortest.New(t)
			s := f.service(sup)
			f.begin(s, gen)
			sup.ArtifactReady(f.ready())
			if err := deliver(t, s, sup, &lv1.SupervisorHello{}); err == nil {
				t.Fatal("acquisition without a mount namespace succeeded")
			}
		},
		"anchor intent": func(gen uint64) {
			sup := supervisortest.New(t)
			s := f.service(sup)
			f.begin(s, gen)
			sup.ArtifactReady(f.ready())
			if err := deliver(t, s, sup, &lv1.SupervisorHello{MountNamespace: f.gone()}); err != nil {
				t.Fatal(err)
			}
		},
		"anchor prepared": func(gen uint64) { f.acquire(gen, f.gone()) },
		"anchor release intent": func(gen uint64) {
			s, _, _ := f.acquire(gen, f.gone())
			if _, err := s.Release(); err != nil {
				t.Fatal(err)
			}
		},
		"anchor clean": func(gen uint64) {
			f.acquire(gen, f.gone())
			f.cleanAnchor(gen)
		},
		"lease removed": func(gen uint64) {
			f.acquire(gen, f.gone())
			f.cleanAnchor(gen)
			if _, err := f.cat.ReleaseLease(ctx, catalog.LeaseKey{ArtifactID: f.art, DomainID: f.dom, Generation: gen}, catalog.ReleaseProof{
				ReleaseIntent: func(catalog.LeaseKey) error { return nil }, MountAbsent: func(catalog.LeaseKey) error { return nil },
			}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for i, c := range []struct {
		state  string
		pl, sa participant.Phase
		lease  bool
		steps  []string // the recovery's model steps
	}{
		{"lower intent", participant.Intent, "", false, []string{"ReleaseUnanchoredLower", "LowerClean"}},
		{"lease inserted", participant.Intent, "", true, []string{"ReleaseUnanchoredLower", "RemoveLease", "LowerClean"}},
		{"anchor intent", participant.LeaseHeld, participant.Intent, true, []string{"AnchorReleaseIntent", "RecoveryUnmountAnchor", "AnchorClean", "RemoveLease", "LowerClean"}},
		{"anchor prepared", participant.LeaseHeld, participant.Prepared, true, []string{"AnchorReleaseIntent", "RecoveryUnmountAnchor", "AnchorClean", "RemoveLease", "LowerClean"}},
		{"anchor release intent", participant.LeaseHeld, participant.ReleaseIntent, true, []string{"RecoveryUnmountAnchor", "AnchorClean", "RemoveLease", "LowerClean"}},
		{"anchor clean", participant.ReleaseIntent, participant.Clean, true, []string{"RemoveLease", "LowerClean"}},
		{"lease removed", participant.ReleaseIntent, participant.Clean, false, []string{"LowerClean"}},
	} {
		gen := uint64(100 + i)
		crashed[c.state](gen)
		f.wantPhases(gen, c.pl, c.sa)
		if f.leased(gen) != c.lease || !f.live(gen) {
			t.Fatalf("%s: lease %v live %v after the crash, want lease %v", c.state, f.leased(gen), f.live(gen), c.lease)
		}
		before := len(f.actions(gen))
		next := f.service(nil) // the next coordinator, before its own generation
		if refusals := next.Recover(gen); len(refusals) > 0 {
			t.Fatalf("%s: recovery refused: %v", c.state, refusals)
		}
		wantSA := participant.Phase("")
		if c.sa != "" {
			wantSA = participant.Clean
		}
		f.wantPhases(gen, participant.Clean, wantSA)
		if f.leased(gen) || f.live(gen) {
			t.Fatalf("%s: lease or records left after recovery", c.state)
		}
		if got := f.actions(gen)[before:]; !slicesEqual(got, c.steps) {
			t.Fatalf("%s: recovery model steps %v, want %v", c.state, got, c.steps)
		}
		// Recovery of a recovered generation does nothing.
		if refusals := next.Recover(gen); len(refusals) > 0 || len(f.actions(gen)) != before+len(c.steps) {
			t.Fatalf("%s: second recovery: %v", c.state, refusals)
		}
	}

	// Mounts not proven absent: the namespace is held. Every record and
	// the lease stay, and the reason is reported.
	f.acquire(200, f.held)
	if refusals := f.service(nil).Recover(200); len(refusals) != 1 || !strings.Contains(refusals[0], "not proven absent") {
		t.Fatalf("recovery with the mount namespace held: %v", refusals)
	}
	f.wantPhases(200, participant.LeaseHeld, participant.Prepared)
	if !f.leased(200) {
		t.Fatal("lease removed without proof")
	}

	// LeaseHeld without its catalog lease contradicts the catalog:
	// recovery fails closed and keeps every record.
	f.acquire(201, f.gone())
	if _, err := f.cat.ReleaseLease(ctx, catalog.LeaseKey{ArtifactID: f.art, DomainID: f.dom, Generation: 201}, catalog.ReleaseProof{
		ReleaseIntent: func(catalog.LeaseKey) error { return nil }, MountAbsent: func(catalog.LeaseKey) error { return nil },
	}); err != nil {
		t.Fatal(err)
	}
	if refusals := f.service(nil).Recover(201); len(refusals) != 1 || !strings.Contains(refusals[0], "has no lease") {
		t.Fatalf("recovery of LeaseHeld without its lease: %v", refusals)
	}
	f.wantPhases(201, participant.LeaseHeld, participant.Prepared)
}

// cleanAnchor records what release's first transaction does before a
// crash: state_anchor Clean and prepared_lower ReleaseIntent, the lease
// still in the catalog.
func (f *fixture) cleanAnchor(gen uint64) {
	f.t.Helper()
	if err := f.st.Update(func(tx *store.Tx) error {
		sa, err := tx.Participant(gen, participant.StateAnchor)
		if err != nil {
			return err
		}
		if err := cleanRecorded(tx, gen, participant.StateAnchor, sa, "test: crash after the anchor's Clean"); err != nil {
			return err
		}
		return tx.ReleaseParticipant(gen, participant.PreparedLower)
	}); err != nil {
		f.t.Fatal(err)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
