package gitrouting

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/stickyignore"
)

// stickyState is the generation's bookkeeping of the Domain's sticky
// ignored paths (SR-13, package stickyignore).
type stickyState struct {
	done chan struct{} // closed when the start scan has finished
	err  error         // of the start scan; read after done
	took time.Duration // the start scan's duration; read after done
	// rules is the generation's ignore-rules snapshot, read from the same
	// host files the Git-routing daemon reads just after.
	rules *ignorerules.Rules
	// found is what the start scan found and record the sticky record it
	// saved (ignoredBinds reads both after awaitSticky).
	found  []stickyignore.Found
	record *stickyignore.Record
	// asked: the start scan succeeded and the daemon was asked for
	// (guarded by Service.mu).
	asked bool
}

// StartSticky records, while the runtime supervisor starts, every path
// that is ignored or already sticky and exists on the host or in the
// Ignored Workspace State, so that it stays routed to state in every
// later generation whatever the sandbox does to .gitignore.
// Start waits for it (awaitSticky) before the daemon is asked
// for, which reads the record.
func (s *Service) StartSticky() {
	s.sticky.done = make(chan struct{})
	if !s.cfg.Profile.IgnoredPathIsolation {
		close(s.sticky.done) // trusted configuration turned isolation off (FR-9)
		return
	}
	go func() {
		defer close(s.sticky.done)
		t0 := time.Now()
		home, _ := os.UserHomeDir()
		_, common := ignorerules.GitDirs(s.cfg.Workspace)
		rules, err := ignorerules.Load(s.cfg.Workspace, ignorerules.ExcludesFile(common, home, os.Getenv("XDG_CONFIG_HOME")))
		if err != nil {
			s.sticky.err = err
			return
		}
		s.sticky.rules = rules
		s.sticky.err = s.recordSticky("start")
		s.sticky.took = time.Since(t0)
	}()
}

// awaitSticky waits for the start scan; its failure fails the generation
// (the daemon must not run without the record).
func (s *Service) awaitSticky() error {
	t0 := time.Now()
	<-s.sticky.done
	s.log.Info("sticky ignored paths scanned", "scan_ms", s.sticky.took.Milliseconds(), "waited_ms", time.Since(t0).Milliseconds())
	if s.sticky.err != nil {
		return fmt.Errorf("record the Domain's sticky ignored paths: %w", s.sticky.err)
	}
	s.mu.Lock()
	s.sticky.asked = true
	s.mu.Unlock()
	return nil
}

// EndSticky records, once the sandbox and the daemon are gone, the paths
// the generation's own rules routed that exist now: ignored content the
// host created during the generation, and what the sandbox wrote to the
// state, stay isolated even if the sandbox edited .gitignore meanwhile.
// Best effort: a coordinator that dies before it leaves the start scan's
// record.
func (s *Service) EndSticky() {
	s.mu.Lock()
	asked := s.sticky.asked
	s.mu.Unlock()
	if !asked {
		return
	}
	if err := s.recordSticky("end"); err != nil {
		s.log.Error("record sticky ignored paths at teardown", "err", err)
	}
}

// recordSticky scans with the generation's rules plus the record and
// saves the record with what it adds (never removes anything).
//
// Preconditions: the coordinator holds the Domain lock.
func (s *Service) recordSticky(when string) error {
	rec, err := stickyignore.Load(s.cfg.DomainRoot)
	if err != nil {
		return err
	}
	rules := s.sticky.rules
	found, err := stickyignore.Scan(s.cfg.Workspace, s.cfg.StateDir, func(rel string, isDir bool) bool {
		if _, ok := rec.Covering(rel); ok {
			return true
		}
		return rules.Ignored(rel, isDir)
	})
	if err != nil {
		return err
	}
	if when == "start" {
		s.sticky.found, s.sticky.record = found, rec
	}
	if added := rec.Add(found, s.cfg.Generation, time.Now()); len(added) > 0 {
		if err := stickyignore.Save(s.cfg.DomainRoot, rec); err != nil {
			return err
		}
		s.log.Info("sticky ignored paths recorded", "when", when, "added", len(added), "sticky_paths", len(rec.Paths))
	}
	if when == "start" {
		s.noteUnignoredSticky(rec, rules)
	}
	return nil
}

// noteUnignoredSticky tells the developer which sticky paths the current
// rules no longer ignore (or the host now tracks): they stay isolated
// until released from the host.
func (s *Service) noteUnignoredSticky(rec *stickyignore.Record, rules *ignorerules.Rules) {
	var names []string
	for _, p := range rec.Paths {
		if !rules.Ignored(p.Path, p.Type == "dir") {
			names = append(names, p.Path)
		}
	}
	if len(names) == 0 {
		return
	}
	s.log.Warn("sticky ignored paths the current rules do not ignore stay routed to state", "count", len(names), "paths", strings.Join(names[:min(len(names), 20)], ","))
	shown := strings.Join(names[:min(len(names), 5)], ", ")
	if len(names) > 5 {
		shown += fmt.Sprintf(" and %d more", len(names)-5)
	}
	s.cfg.Progress(fmt.Sprintf("note: %s stay(s) isolated from your host copy although the workspace's Git ignore rules no longer ignore it (ignored in an earlier run, so sticky): `lazaret state ignored list` shows them, `lazaret state ignored release PATH` shares your copy from the next run", shown))
}
