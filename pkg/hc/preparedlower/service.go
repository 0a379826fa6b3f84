package preparedlower

import (
	"context"
	"log/slog"
	"sync"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/store"
)

// Role is the prepared lower and State Anchor driver as the coordinator
// drives it: Begin once the generation is recorded, SupervisorMessage for
// the RS reports this role owns, Release before RS is stopped (release
// intent), Clean once RS was reaped (clean with proof), Recover for a dead
// generation at bootstrap.
type Role interface {
	Begin(gen uint64)
	SupervisorMessage(ctx context.Context, m *lv1.SupervisorMessage, hello *lv1.SupervisorHello) error
	Release() (bool, error)
	Clean(rs *proc.Child)
	Recover(gen uint64) []string
}

var _ Role = (*Service)(nil)

// Config is what the role needs from its coordinator.
type Config struct {
	Log   *slog.Logger
	Store *store.Store
	// Domain names this Domain's leases; StorageRoot holds the Storage
	// Catalog and the prepared artifacts.
	Domain      domain.ID
	StorageRoot string
	// Image is the configured image RS must have prepared;
	// PersistentPaths the profile's paths RS anchors.
	Image           string
	PersistentPaths []string
	// Coordinator is this coordinator's identity (the sandbox record's
	// coordinator slot).
	Coordinator pidfs.Identity
	// Supervisor returns RS's identity once it is spawned: acquisition
	// commits its slot before LeaseRecorded lets it mount.
	Supervisor func() pidfs.Identity
	// Send sends a message to RS (LeaseRecorded).
	Send func(context.Context, *lv1.CoordinatorMessage) error
	// Mark records a start-up stage (LAZARET_DEBUG=timing); nil records
	// nothing.
	Mark func(stage string)
}

// mark records a start-up stage when the coordinator traces them.
func (s *Service) mark(stage string) {
	if s.cfg.Mark != nil {
		s.cfg.Mark(stage)
	}
}

// Service drives one generation's prepared lower and State Anchors, and
// the recovery of dead generations' ones.
type Service struct {
	cfg Config
	log *slog.Logger
	gen uint64 // this coordinator's generation (Begin); 0 before

	// leaseMu serialises lease and anchor acquisition with the start of
	// release: once BeginRelease set releasing, no acquisition step is
	// taken.
	leaseMu   sync.Mutex
	releasing bool

	mu sync.Mutex
	// leased is the prepared artifact whose lease is recorded; unmounted
	// the anchor mount IDs RS reported unmounted (SupervisorStopped).
	leased    string
	unmounted []uint64
	pl        steps       // the model steps recorded (model.go)
	ahead     *aheadLease // LeaseAhead's, once begun
}

// New returns the role's Service over an open Domain Store.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: cfg.Log}
}

// Begin binds the Service to this coordinator's new generation, before
// RS is spawned.
func (s *Service) Begin(gen uint64) {
	s.gen = gen
	// Recovery of dead generations precedes Begin; from here on the
	// role's lines name its generation.
	s.log = s.cfg.Log.With("generation", gen)
}

// SupervisorMessage handles the RS reports this role owns: ArtifactReady
// (acquisition, answered by LeaseRecorded), AnchorsMounted (state_anchor
// Prepared) and SupervisorStopped (the anchor mounts RS unmounted).
// hello is the generation's verified SupervisorHello.
func (s *Service) SupervisorMessage(ctx context.Context, m *lv1.SupervisorMessage, hello *lv1.SupervisorHello) error {
	switch m.GetMsg().(type) {
	case *lv1.SupervisorMessage_Artifact:
		return s.Acquire(ctx, m.GetArtifact(), hello)
	case *lv1.SupervisorMessage_AnchorsMounted:
		return s.AnchorsMounted(m.GetAnchorsMounted(), hello)
	case *lv1.SupervisorMessage_Stopped:
		s.mu.Lock()
		s.unmounted = m.GetStopped().GetAnchorsUnmounted()
		s.mu.Unlock()
		return nil
	}
	return errdefs.New(errdefs.ErrInvalid, "the prepared lower role does not handle %T", m.GetMsg())
}

// BeginRelease records that teardown began releasing the generation (the
// model's BeginRelease): no lease or anchor acquisition step is taken
// after it.
func (s *Service) BeginRelease() {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	s.releasing = true
	s.step(func(p *steps) {
		if p.phase == phaseStarting || p.phase == phaseReady {
			s.emitLocked("BeginRelease")
			p.phase = phaseStopping
		}
	})
}

// Leased returns the artifact whose lease this generation recorded.
func (s *Service) Leased() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leased
}

func (s *Service) catalog() (*catalog.Catalog, error) {
	return catalog.New(s.cfg.StorageRoot, catalog.Options{Logger: s.log})
}

func (s *Service) leaseKey(gen uint64, artifact string) catalog.LeaseKey {
	return catalog.LeaseKey{ArtifactID: artifact, DomainID: s.cfg.Domain, Generation: gen}
}
