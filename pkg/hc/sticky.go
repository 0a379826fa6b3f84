package hc

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
	// asked: the start scan succeeded and the daemon was asked for
	// (guarded by coordinator.mu).
	asked bool
}

// startSticky records, while the runtime supervisor starts, every path
// that is ignored or already sticky and exists on the host or in the
// Ignored Workspace State, so that it stays routed to state in every
// later generation whatever the sandbox does to .gitignore.
// gitSentryStart waits for it (awaitSticky) before the daemon is asked
// for, which reads the record.
func (c *coordinator) startSticky() {
	c.sticky.done = make(chan struct{})
	if !c.profile.IgnoredPathIsolation {
		close(c.sticky.done) // trusted configuration turned isolation off (FR-9)
		return
	}
	go func() {
		defer close(c.sticky.done)
		t0 := time.Now()
		home, _ := os.UserHomeDir()
		_, common := ignorerules.GitDirs(c.ws)
		rules, err := ignorerules.Load(c.ws, ignorerules.ExcludesFile(common, home, os.Getenv("XDG_CONFIG_HOME")))
		if err != nil {
			c.sticky.err = err
			return
		}
		c.sticky.rules = rules
		c.sticky.err = c.recordSticky("start")
		c.sticky.took = time.Since(t0)
	}()
}

// awaitSticky waits for the start scan; its failure fails the generation
// (the daemon must not run without the record).
func (c *coordinator) awaitSticky() error {
	t0 := time.Now()
	<-c.sticky.done
	c.log.Info("sticky ignored paths scanned", "scan_ms", c.sticky.took.Milliseconds(), "waited_ms", time.Since(t0).Milliseconds())
	if c.sticky.err != nil {
		return fmt.Errorf("record the Domain's sticky ignored paths: %w", c.sticky.err)
	}
	c.mu.Lock()
	c.sticky.asked = true
	c.mu.Unlock()
	return nil
}

// endSticky records, once the sandbox and the daemon are gone, the paths
// the generation's own rules routed that exist now: ignored content the
// host created during the generation, and what the sandbox wrote to the
// state, stay isolated even if the sandbox edited .gitignore meanwhile.
// Best effort: a coordinator that dies before it leaves the start scan's
// record.
func (c *coordinator) endSticky() {
	c.mu.Lock()
	asked := c.sticky.asked
	c.mu.Unlock()
	if !asked {
		return
	}
	if err := c.recordSticky("end"); err != nil {
		c.log.Error("record sticky ignored paths at teardown", "err", err)
	}
}

// recordSticky scans with the generation's rules plus the record and
// saves the record with what it adds (never removes anything).
//
// Preconditions: the coordinator holds the Domain lock.
func (c *coordinator) recordSticky(when string) error {
	rec, err := stickyignore.Load(c.paths.DomainRoot)
	if err != nil {
		return err
	}
	rules := c.sticky.rules
	found, err := stickyignore.Scan(c.ws, c.paths.IgnoredStateDir(), func(rel string, isDir bool) bool {
		if _, ok := rec.Covering(rel); ok {
			return true
		}
		return rules.Ignored(rel, isDir)
	})
	if err != nil {
		return err
	}
	if added := rec.Add(found, c.generation, time.Now()); len(added) > 0 {
		if err := stickyignore.Save(c.paths.DomainRoot, rec); err != nil {
			return err
		}
		c.log.Info("sticky ignored paths recorded", "when", when, "added", len(added), "sticky_paths", len(rec.Paths))
	}
	if when == "start" {
		c.noteUnignoredSticky(rec, rules)
	}
	return nil
}

// noteUnignoredSticky tells the developer which sticky paths the current
// rules no longer ignore (or the host now tracks): they stay isolated
// until released from the host.
func (c *coordinator) noteUnignoredSticky(rec *stickyignore.Record, rules *ignorerules.Rules) {
	var names []string
	for _, p := range rec.Paths {
		if !rules.Ignored(p.Path, p.Type == "dir") {
			names = append(names, p.Path)
		}
	}
	if len(names) == 0 {
		return
	}
	c.log.Warn("sticky ignored paths the current rules do not ignore stay routed to state", "count", len(names), "paths", strings.Join(names[:min(len(names), 20)], ","))
	shown := strings.Join(names[:min(len(names), 5)], ", ")
	if len(names) > 5 {
		shown += fmt.Sprintf(" and %d more", len(names)-5)
	}
	c.addProgress(fmt.Sprintf("note: %s stay(s) isolated from your host copy although the workspace's Git ignore rules no longer ignore it (ignored in an earlier run, so sticky): `lazaret state ignored list` shows them, `lazaret state ignored release PATH` shares your copy from the next run", shown))
}
