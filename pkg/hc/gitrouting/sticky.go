package gitrouting

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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
	// gitignores are the .gitignore files rules holds, as the start scan
	// read them (Start hands them to the daemon).
	gitignores []ignorerules.Gitignore
	// asked: the start scan succeeded and the daemon was asked for
	// (guarded by Service.mu).
	asked bool
}

// StickyScan is the start scan of a Domain's sticky ignored paths: the
// generation's ignore rules and every existing path they or the sticky
// record route to state. It reads the workspace, the Ignored Workspace
// State and the record, and writes nothing, so the coordinator begins it
// as soon as it holds the Domain lock (BeginStickyScan), while its store
// opens, and the generation's Service records its findings (StartSticky).
type StickyScan struct {
	done  chan struct{}
	err   error
	took  time.Duration
	rules *ignorerules.Rules
	rec   *stickyignore.Record
	found []stickyignore.Found
	// gitignores are the .gitignore files the scan read into rules, in
	// the order read (parents first): the daemon's too (Start).
	gitignores []ignorerules.Gitignore
}

// BeginStickyScan begins the start scan of the workspace ws and the Ignored
// Workspace State stateDir with the record of domainRoot; nil when
// ignored-path isolation is off (FR-9: nothing is routed by the rules).
// The caller holds the Domain lock, which every writer of the record and
// the state takes.
func BeginStickyScan(ws, domainRoot, stateDir string, isolate bool) *StickyScan {
	if !isolate {
		return nil
	}
	sc := &StickyScan{done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		t0 := time.Now()
		defer func() { sc.took = time.Since(t0) }()
		home, _ := os.UserHomeDir()
		_, common := ignorerules.GitDirs(ws)
		// The index and the global rule files now; each directory's
		// .gitignore as the scan enters it (one walk of the workspace).
		if sc.rules, sc.err = ignorerules.LoadTracked(ws, ignorerules.ExcludesFile(common, home, os.Getenv("XDG_CONFIG_HOME"))); sc.err != nil {
			return
		}
		if sc.rec, sc.err = stickyignore.Load(domainRoot); sc.err != nil {
			return
		}
		sc.found, sc.err = scanSticky(ws, stateDir, sc.rec, sc.rules, &sc.gitignores)
	}()
	return sc
}

// scanSticky finds what rules or rec route to state in the workspace ws
// and the state dir. With read (the start scan's), the rules have no
// .gitignore file yet: each is added, and appended to *read, as the scan
// enters its directory, before the
// directory's entries are classified, as Git reads them (parents first,
// none inside a routed directory). The coordinator's other readers of the
// rules decide nothing inside a routed directory either: a sticky one is
// covered by the record first, an ignored one by its own exclusion.
func scanSticky(ws, stateDir string, rec *stickyignore.Record, rules *ignorerules.Rules, read *[]ignorerules.Gitignore) ([]stickyignore.Found, error) {
	var enter stickyignore.EnterHook
	if read != nil {
		enter = func(rel string, dirfd int, gitignore uint8) error {
			if gitignore == 0 || gitignore == unix.DT_LNK || gitignore == unix.DT_DIR {
				return nil // none, or nothing Git reads
			}
			b, err := rules.LoadGitignoreAt(ws, dirfd, rel)
			if b != nil {
				*read = append(*read, ignorerules.Gitignore{Dir: rel, Content: b})
			}
			return err
		}
	}
	return stickyignore.ScanWith(ws, stateDir, func(rel string, isDir bool) bool {
		if _, ok := rec.Covering(rel); ok {
			return true
		}
		return rules.Ignored(rel, isDir)
	}, enter)
}

// StartSticky records what the start scan sc (BeginStickyScan, for this
// Service's workspace, Domain Root and state) found, while the runtime
// supervisor starts: every path that is ignored or already sticky and
// exists on the host or in the Ignored Workspace State, so that it stays
// routed to state in every later generation whatever the sandbox does to
// .gitignore. Start waits for it (awaitSticky) before the daemon is asked
// for, which reads the record.
func (s *Service) StartSticky(sc *StickyScan) {
	s.sticky.done = make(chan struct{})
	if !s.cfg.Profile.IgnoredPathIsolation {
		close(s.sticky.done) // trusted configuration turned isolation off (FR-9)
		return
	}
	if sc == nil {
		sc = BeginStickyScan(s.cfg.Workspace, s.cfg.DomainRoot, s.cfg.StateDir, true)
	}
	go func() {
		defer close(s.sticky.done)
		<-sc.done
		s.sticky.took = sc.took
		if s.sticky.err = sc.err; sc.err != nil {
			return
		}
		s.sticky.rules, s.sticky.found, s.sticky.record, s.sticky.gitignores = sc.rules, sc.found, sc.rec, sc.gitignores
		s.sticky.err = s.saveSticky("start", sc.rec, sc.found)
		if s.sticky.err == nil {
			s.noteUnignoredSticky(sc.rec, sc.rules)
		}
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
// saves the record with what it adds (never removes anything): the end
// scan (EndSticky).
//
// Preconditions: the coordinator holds the Domain lock.
func (s *Service) recordSticky(when string) error {
	rec, err := stickyignore.Load(s.cfg.DomainRoot)
	if err != nil {
		return err
	}
	found, err := scanSticky(s.cfg.Workspace, s.cfg.StateDir, rec, s.sticky.rules, nil)
	if err != nil {
		return err
	}
	return s.saveSticky(when, rec, found)
}

// saveSticky adds to rec what a scan found, recorded by this generation,
// and saves it when that added anything.
func (s *Service) saveSticky(when string, rec *stickyignore.Record, found []stickyignore.Found) error {
	if added := rec.Add(found, s.cfg.Generation, time.Now()); len(added) > 0 {
		if err := stickyignore.Save(s.cfg.DomainRoot, rec); err != nil {
			return err
		}
		s.log.Info("sticky ignored paths recorded", "when", when, "added", len(added), "sticky_paths", len(rec.Paths))
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
