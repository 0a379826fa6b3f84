package gitrouting

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitsentry"
	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// Start computes the workspace's Git Sentry (SR-4) into the
// sandbox description, records the git_routing participant's bare Intent
// and returns what RS needs to acquire the Git-routing daemon. The daemon
// serves /workspace whether or not the profile disables ignored-path
// isolation (FR-9; then it applies no ignore rules): it is what keeps a
// .git the host lacks, nested repositories, absent editor configuration
// and the host Git configuration guard (SR-4) away from the host, none of
// which a mount could cover.
func (s *Service) Start(sb *ocispec.Sandbox) (*lv1.GitRoutingStart, error) {
	plan, err := gitsentry.Compute(s.cfg.Workspace, gitsentry.Options{EditorConfig: config.EditorConfigDirs, ShareEditorConfig: s.cfg.Profile.ShareEditorConfig, MountCommonDir: s.cfg.Profile.GitCommonDir})
	if err != nil {
		return nil, err
	}
	if plan.CommonDir != "" {
		// The developer opted in (SR-3): the linked worktree's common Git
		// directory is mounted at its own path, straight from the host,
		// with its Git Sentry.
		s.log.Info("linked worktree: mounting its common Git directory (git_common_dir opt-in)", "common_dir", plan.CommonDir, "gitdir", plan.GitDir)
		sb.GitCommonDir = plan.CommonDir
		for _, m := range plan.Common {
			sb.CommonProtected = append(sb.CommonProtected, ocispec.Protected{Rel: m.Rel, Source: m.Source, ReadOnly: m.Kind == gitsentry.ReadOnly, Transient: m.Kind == gitsentry.Transient})
		}
	}
	isolate := s.cfg.Profile.IgnoredPathIsolation
	if isolate {
		if err := s.awaitSticky(); err != nil { // the daemon reads the record
			return nil, err
		}
	}
	mnt := s.cfg.RoutedWorkspace
	for _, m := range plan.Mounts {
		src := m.Source
		if m.Kind == gitsentry.Bind {
			// Git directories come through the daemon, whose name policy
			// refuses a new commondir, config or hooks (package gitroute).
			src = filepath.Join(mnt, filepath.FromSlash(m.Rel))
		}
		sb.Protected = append(sb.Protected, ocispec.Protected{Rel: m.Rel, Source: src, ReadOnly: m.Kind == gitsentry.ReadOnly, Transient: m.Kind == gitsentry.Transient})
	}
	sb.RouterSource, sb.WorkspaceSource = mnt, mnt
	if isolate && s.cfg.Profile.IgnoredBinds {
		if err := s.ignoredBinds(sb); err != nil {
			return nil, fmt.Errorf("bind ignored directories from Ignored Workspace State: %w", err)
		}
	}
	if !isolate {
		s.log.Info("ignored-path isolation disabled by the profile: Git-ignored paths are the host's; the Git-routing daemon still keeps Git directories the host lacks, absent editor configuration and the Git configuration guard")
	}
	home, _ := os.UserHomeDir()
	_, common := ignorerules.GitDirs(s.cfg.Workspace)
	files, trees := s.guardPaths(plan)
	s.logGuard(files, trees)
	start := &lv1.GitRoutingStart{
		Workspace: s.cfg.Workspace, StateDir: s.cfg.StateDir, Mountpoint: mnt,
		ExcludesFile: ignorerules.ExcludesFile(common, home, os.Getenv("XDG_CONFIG_HOME")),
		HiddenNames:  plan.RoutedNames(), IgnoredPathIsolation: isolate,
		GuardedFiles: files, GuardedTrees: trees,
	}
	if isolate && s.cfg.RulesSnapshot != "" {
		// The daemon applies the .gitignore files the start scan read:
		// the same rules as the sticky record's, without a second walk.
		if err := ignorerules.WriteSnapshot(s.cfg.RulesSnapshot, s.sticky.gitignores); err != nil {
			return nil, fmt.Errorf("hand the workspace's .gitignore files to the Git-routing daemon: %w", err)
		}
		start.RulesSnapshot = s.cfg.RulesSnapshot
	}
	// Keep-id: the developer's files appear as the profile's session user.
	u := s.cfg.Profile.SessionUser()
	start.OwnerUid, start.OwnerGid = u.UID, u.GID
	if err := os.MkdirAll(start.StateDir, 0o700); err != nil {
		return nil, err
	}
	if s.cfg.Store != nil {
		if err := s.cfg.Store.Update(func(tx *store.Tx) error {
			return tx.PutParticipant(s.cfg.Generation, participant.GitRouting, participant.Intent, nil)
		}); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.wanted = true
	s.plan, s.sentFiles, s.sentTrees = plan, files, trees
	s.mu.Unlock()
	return start, nil
}

func gitRoutingSnapshot(s *lv1.GitRoutingSnapshotV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_GitRouting{GitRouting: s}}
}

// CommitStaged records the daemon's staged ownership and
// acknowledges it with an exact echo (CausalChildAcquisitionV1 step 6);
// the coordinator has verified the signature and the generation.
// A report refused before it is recorded leaves no trace: the role still
// takes the valid one.
func (s *Service) CommitStaged(st *lv1.StagedProcessOwnership) error {
	s.mu.Lock()
	wanted, dup := s.wanted, s.staged != nil
	if wanted && !dup {
		s.staged = st
	}
	s.mu.Unlock()
	if !wanted {
		return errdefs.New(errdefs.ErrRefused, "staged git_routing ownership, but this generation did not ask for a Git-routing daemon (yet)")
	}
	if dup {
		return errdefs.New(errdefs.ErrRefused, "duplicate staged git_routing ownership")
	}
	if err := s.recordStaged(st); err != nil {
		s.mu.Lock()
		s.staged = nil
		s.mu.Unlock()
		return err
	}
	return s.cfg.Ack(st)
}

// recordStaged records the daemon's staged ownership.
func (s *Service) recordStaged(st *lv1.StagedProcessOwnership) error {
	id, err := store.IdentityFromProto(st.Identity)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("staged git_routing identity: %w", err), errdefs.ErrRefused)
	}
	if s.cfg.Store == nil {
		return nil
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(s.cfg.Generation, participant.GitRouting, participant.Intent, gitRoutingSnapshot(&lv1.GitRoutingSnapshotV1{Daemon: store.StagedSlot(id)}))
	})
}

// Ready checks the daemon's readiness evidence against its staged
// identity and records in tx (the coordinator's one transaction of the
// publication) the participant Prepared with committed ownership and the
// mount (step 9).
func (s *Service) Ready(tx *store.Tx, r *lv1.SandboxReady) error {
	s.mu.Lock()
	staged, wanted := s.staged, s.wanted
	s.mu.Unlock()
	ev := r.GitRouting
	switch {
	case !wanted && ev == nil && staged == nil:
		return nil
	case !wanted:
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor reports a Git-routing daemon the profile did not ask for")
	case ev == nil || staged == nil || !proto.Equal(ev.Daemon, staged.Identity):
		return errdefs.New(errdefs.ErrRefused, "SandboxReady names a Git-routing daemon that was not staged")
	}
	id, err := store.IdentityFromProto(ev.Daemon)
	if err != nil {
		return err
	}
	snap := &lv1.GitRoutingSnapshotV1{
		Daemon: store.CommittedSlot(id),
		Mount:  &lv1.MountIdentityV1{MountId: ev.MountId, FsDev: ev.FsDev, MountPoint: &lv1.FileIdentityV1{Dev: ev.MountpointDev, Ino: ev.MountpointIno, PathHint: ev.Mountpoint}},
	}
	if s.cfg.Store == nil {
		return nil
	}
	return tx.PutParticipant(s.cfg.Generation, participant.GitRouting, participant.Prepared, gitRoutingSnapshot(snap))
}

// Release records ReleaseIntent before teardown stops the daemon.
func (s *Service) Release() error {
	return s.cfg.Store.Update(s.ReleaseTx)
}

// ReleaseTx is Release within tx (the teardown records every release
// intent in one transaction).
func (s *Service) ReleaseTx(tx *store.Tx) error {
	_, err := tx.ReleaseHeld(s.cfg.Generation, participant.GitRouting)
	return err
}

// Clean proves the generation g's recorded daemon absent (absence:
// PidfsRecoveryMatch, stopping a survivor through the matched pidfd) and
// records the participant Clean; its mount lived only in the dead RS's
// mount namespace, so the daemon's absence ends it.
func Clean(st *store.Store, g uint64, detail string, absence func(pidfs.Identity) error) error {
	var p *store.Participant
	err := st.View(func(tx *store.Tx) error {
		var err error
		p, err = tx.Participant(g, participant.GitRouting)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.Phase == participant.Clean {
		return nil
	}
	var absent []pidfs.Authority
	if sl, ok := p.View.Slots["daemon"]; ok && sl.State != participant.Unassigned {
		if sl.Legacy != nil {
			return errdefs.New(errdefs.ErrRefused, "git_routing daemon: legacy-unverified identity")
		}
		if err := absence(sl.Identity); err != nil {
			return err
		}
		absent = append(absent, sl.Identity.Authority)
	}
	return releaseAndClean(st, g, detail, absent)
}

// releaseAndClean records the git_routing participant's release and Clean
// with the exact absence proof (store.(*Tx).ReleaseAndClean).
func releaseAndClean(st *store.Store, gen uint64, detail string, absent []pidfs.Authority) error {
	return st.Update(func(tx *store.Tx) error {
		return tx.ReleaseAndClean(gen, participant.GitRouting, detail, absent)
	})
}
