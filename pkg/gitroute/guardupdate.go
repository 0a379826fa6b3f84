package gitroute

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// GuardFD is the daemon's descriptor of guard updates (--guard-fd): the
// Runtime Supervisor writes one GuardUpdate line each time the coordinator
// recomputes the host Git configuration guard while the Domain runs.
const GuardFD = 3

// GuardUpdate is one line of the guard updates: the whole new guard.
type GuardUpdate struct {
	Files []string `json:"files"`
	Trees []string `json:"trees"`
}

// Line encodes u as one line of the guard updates.
func (u GuardUpdate) Line() ([]byte, error) {
	b, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// maxGuardLine bounds one update (a guard of thousands of paths fits).
const maxGuardLine = 1 << 20

// readGuardUpdates applies each update read from in to r until in ends. A
// malformed update is logged and changes nothing: the guard in force stays.
func readGuardUpdates(in io.Reader, r *Router, log *slog.Logger) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), maxGuardLine)
	for sc.Scan() {
		g, err := parseGuardUpdate(sc.Bytes())
		if err != nil {
			log.Error("a host Git configuration guard update refused: the guard in force stays", "err", err)
			continue
		}
		r.SetGuard(g)
		log.Info("host Git configuration guard updated: host Git's configuration changed while the Domain ran",
			"guarded_files", strings.Join(g.Files, " "), "guarded_trees", strings.Join(g.Trees, " "))
	}
	if err := sc.Err(); err != nil {
		log.Error("guard updates ended", "err", err)
	}
}

// parseGuardUpdate decodes and checks one update line.
func parseGuardUpdate(line []byte) (Guard, error) {
	var u GuardUpdate
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return Guard{}, fmt.Errorf("decode: %w", err)
	}
	g := Guard{Files: u.Files, Trees: u.Trees}
	if err := g.CheckPaths(); err != nil {
		return Guard{}, err
	}
	return g, nil
}
