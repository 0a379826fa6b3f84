package gitrouting

import (
	"log/slog"
	"slices"
	"sync"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/gitsentry"
	"github.com/lazaret/lazaret/pkg/store"
)

// Config is what the Git-routing role needs from its coordinator.
type Config struct {
	Log *slog.Logger
	// Store is the Domain Store the git_routing participant is recorded
	// in; nil records nothing.
	Store      *store.Store
	Generation uint64
	Profile    *config.Profile
	// Workspace is the canonical Agent Workspace; DomainRoot holds the
	// sticky record; StateDir is the Ignored Workspace State and
	// RoutedWorkspace the daemon's mount point.
	Workspace, DomainRoot, StateDir, RoutedWorkspace string
	// RulesSnapshot is where Start writes the .gitignore files the start
	// scan read, for the daemon ("" for none: the daemon walks for them).
	RulesSnapshot string
	// Guard is what host Git runs or reads from the workspace, kept
	// read-only by the daemon (or set later, before Start: SetGuard).
	Guard []gitconfigguard.Path
	// Progress reports a line (a note) to the starting sessions.
	Progress func(line string)
	// Ack sends the signed exact echo of RS's staged ownership.
	Ack func(*lv1.StagedProcessOwnership) error
}

// Service is the generation's Git-routing role.
type Service struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	wanted bool           // Start asked RS for the daemon
	plan   gitsentry.Plan // Start's Git Sentry plan
	// sentFiles and sentTrees are the daemon's guard: Start's, or the last
	// GuardUpdate's.
	sentFiles, sentTrees []string
	staged               *lv1.StagedProcessOwnership // the daemon's staged ownership, acknowledged
	sticky               stickyState
}

// New returns the generation's Git-routing role; nothing is started.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	return &Service{cfg: cfg, log: cfg.Log}
}

// SetGuard sets Config.Guard once the host's Git configuration is read,
// before Start and on the goroutine that calls it.
func (s *Service) SetGuard(g []gitconfigguard.Path) { s.cfg.Guard = g }

// GuardUpdate is the daemon's guard for the host Git configuration guard
// paths g, recomputed while the Domain runs (package hc watches host Git's
// configuration), and whether it differs from the daemon's: changed is
// false, and nothing is to be sent, without a daemon or when the guard is
// the same. A changed guard is taken as the daemon's from now on.
func (s *Service) GuardUpdate(g []gitconfigguard.Path) (files, trees []string, changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wanted {
		return nil, nil, false
	}
	s.cfg.Guard = g
	files, trees = s.guardPaths(s.plan)
	if slices.Equal(files, s.sentFiles) && slices.Equal(trees, s.sentTrees) {
		return nil, nil, false
	}
	s.sentFiles, s.sentTrees = files, trees
	return files, trees, true
}

// Wanted reports whether the generation asked RS for a Git-routing daemon.
func (s *Service) Wanted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wanted
}
