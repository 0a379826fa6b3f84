package ignorerules

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Gitignore is one .gitignore file of a workspace: its directory (slash-
// separated, relative to the workspace, "" for the top) and its content.
type Gitignore struct {
	Dir     string `json:"dir"`
	Content []byte `json:"content"`
}

// SnapshotVersion is the version of the snapshot file; a newer one is
// refused.
const SnapshotVersion = 1

// maxSnapshot bounds a snapshot file: 64 .gitignore files at the bound of
// each, far beyond any workspace's.
const maxSnapshot = 64 * maxRuleFile

// snapshot is the file WriteSnapshot writes.
type snapshot struct {
	Version    int         `json:"version"`
	Gitignores []Gitignore `json:"gitignores"`
}

// WriteSnapshot writes files (parents before children, as read) to the new
// file p (mode 0600, replaced through a temporary file and a rename): the
// .gitignore files of a generation's start, read once by the Host
// Coordinator and handed to the Git-routing daemon (ReadSnapshot), so that
// both apply the same rules and the daemon does not walk the workspace
// again. It is a runtime file of one generation, not durable state.
func WriteSnapshot(p string, files []Gitignore) error {
	if files == nil {
		files = []Gitignore{}
	}
	b, err := json.Marshal(snapshot{Version: SnapshotVersion, Gitignores: files})
	if err != nil {
		return err
	}
	if len(b) > maxSnapshot {
		return errdefs.New(errdefs.ErrRefused, "the workspace's .gitignore files (%d bytes encoded) exceed the %d bytes Lazaret hands to the Git-routing daemon", len(b), maxSnapshot)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// ReadSnapshot reads a file WriteSnapshot wrote; another version, or a
// directory that is not a clean workspace-relative path or comes twice,
// is refused naming the file.
func ReadSnapshot(p string) ([]Gitignore, error) {
	b, err := readRuleFile(p, maxSnapshot)
	if err != nil {
		return nil, err
	}
	var s snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("the .gitignore snapshot %s: %w", p, err), errdefs.ErrCorrupt)
	}
	if s.Version != SnapshotVersion {
		return nil, errdefs.New(errdefs.ErrCorrupt, "the .gitignore snapshot %s has version %d; this build reads %d (use the same Lazaret build for the coordinator and the runtime supervisor)", p, s.Version, SnapshotVersion)
	}
	seen := map[string]bool{}
	for _, g := range s.Gitignores {
		if g.Dir != "" && (!fs.ValidPath(g.Dir) || g.Dir == ".") {
			return nil, errdefs.New(errdefs.ErrCorrupt, "the .gitignore snapshot %s names directory %q, not a clean workspace-relative path", p, g.Dir)
		}
		if seen[g.Dir] {
			return nil, errdefs.New(errdefs.ErrCorrupt, "the .gitignore snapshot %s names directory %q twice", p, g.Dir)
		}
		seen[g.Dir] = true
	}
	return s.Gitignores, nil
}

// AddGitignores adds files (a snapshot's, parents before children) as
// LoadGitignores would have read them.
func (r *Rules) AddGitignores(files []Gitignore) error {
	for _, g := range files {
		if err := r.AddGitignore(g.Dir, g.Content); err != nil {
			return fmt.Errorf(".gitignore of %q: %w", g.Dir, err)
		}
	}
	return nil
}
