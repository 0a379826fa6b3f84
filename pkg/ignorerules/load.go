package ignorerules

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxRuleFile bounds one .gitignore/exclude file; maxIndex bounds the
// index, and maxIndexPaths the total length of the paths it records
// (version 4 stores each as a suffix of the previous one; a smaller index
// may expand eight times, or to 64 MiB); an entry takes at least
// minIndexEntry bytes (62 of header, a path byte or prefix varint, a NUL).
const (
	maxRuleFile   = 4 << 20
	maxIndex      = 1 << 30
	maxIndexPaths = 1 << 30
	minIndexEntry = 64
)

// GitDirs returns the Git directory of the workspace ws (ws/.git, or the
// directory a top-level gitfile names, e.g. a linked worktree's
// <common>/worktrees/W) and its common directory (where info/exclude and
// config live: the Git directory itself unless it has a commondir file).
func GitDirs(ws string) (gitdir, common string) {
	gitdir = filepath.Join(ws, ".git")
	if st, err := os.Lstat(gitdir); err == nil && st.Mode().IsRegular() {
		if b, err := readRuleFile(gitdir, maxRuleFile); err == nil {
			if t, ok := GitfileTarget(b, ws); ok {
				gitdir = t
			}
		}
	}
	common = gitdir
	if b, err := readRuleFile(filepath.Join(gitdir, "commondir"), maxRuleFile); err == nil {
		c := strings.TrimSpace(string(b))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitdir, c)
		}
		common = filepath.Clean(c)
	}
	return gitdir, common
}

// GitfileTarget is the Git directory a gitfile's content ("gitdir: X")
// names, X resolved against dir, the directory holding the gitfile; ok is
// false when the content is not a gitfile's.
func GitfileTarget(content []byte, dir string) (string, bool) {
	t, ok := strings.CutPrefix(strings.TrimSpace(string(content)), "gitdir:")
	if !ok {
		return "", false
	}
	t = strings.TrimSpace(t)
	if !filepath.IsAbs(t) {
		t = filepath.Join(dir, t)
	}
	return filepath.Clean(t), true
}

// Load reads the host's rules for the workspace ws at generation start:
// the index of its Git directory and info/exclude of the common directory
// (GitDirs; a linked worktree has its own index). excludesFile is the
// resolved core.excludesFile ("" for none; a missing file is no rules). A
// missing index means nothing is tracked. It is LoadTracked, then
// LoadGitignores.
func Load(ws, excludesFile string) (*Rules, error) {
	r, err := LoadTracked(ws, excludesFile)
	if err != nil {
		return nil, err
	}
	if err := r.LoadGitignores(ws); err != nil {
		return nil, err
	}
	return r, nil
}

// LoadTracked is Load without the workspace's .gitignore files: the index
// and the global rule files, a few reads. LoadGitignores adds the rest,
// a walk of the whole workspace, which a caller may run later, as long as
// no decision is taken from the rules before it ended.
func LoadTracked(ws, excludesFile string) (*Rules, error) {
	r := NewRules()
	gitdir, common := GitDirs(ws)
	if b, err := readRuleFile(filepath.Join(gitdir, "index"), maxIndex); err == nil {
		paths, gitlinks, err := ParseIndexEntries(b)
		if err != nil {
			return nil, fmt.Errorf("read Git index of %s: %w", ws, err)
		}
		for _, p := range paths {
			r.AddTracked(p)
		}
		r.gitlinks = gitlinks
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for i, f := range []string{filepath.Join(common, "info", "exclude"), excludesFile} {
		if f == "" {
			continue
		}
		b, err := readRuleFile(f, maxRuleFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		add := r.AddGlobal
		if i == 1 {
			add = r.AddExcludesFile
		}
		if err := add(b); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// LoadGitignores adds the .gitignore files of the workspace ws to r (from
// LoadTracked): a walk of the whole workspace but for .git and ignored
// directories. r must not be read meanwhile.
func (r *Rules) LoadGitignores(ws string) error {
	// Walk for .gitignore files, parents before children so a directory's
	// exclusion is known before descending (Git reads no .gitignore inside
	// an excluded directory).
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == ws {
				return err
			}
			return nil // unreadable subtree: no rules from it
		}
		rel, _ := filepath.Rel(ws, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		if d.IsDir() {
			if rel == ".git" || (rel != "" && r.Ignored(rel, true)) {
				return filepath.SkipDir
			}
			b, err := readRuleFile(filepath.Join(p, ".gitignore"), maxRuleFile)
			if err == nil {
				return r.AddGitignore(rel, b)
			}
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ELOOP) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read ignore rules of %s: %w", ws, err)
	}
	return nil
}

// LoadGitignoreAt adds the rules of the .gitignore file in directory rel
// of the workspace ws, open at dirfd, and returns the file's content (nil
// for none): what LoadGitignores reads there, for a caller that walks the
// workspace itself (parents before children, no directory the rules
// exclude: stickyignore.ScanWith). A missing file, a symlink or anything
// but a regular file adds nothing; a file that cannot be read, or is over
// the size bound, is an error naming it.
func (r *Rules) LoadGitignoreAt(ws string, dirfd int, rel string) ([]byte, error) {
	p := filepath.Join(ws, filepath.FromSlash(rel), ".gitignore")
	b, err := readRuleFileAt(dirfd, ".gitignore", p, maxRuleFile)
	if err == nil {
		err = r.AddGitignore(rel, b)
	} else if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ignore rules of %s: %w", ws, err)
	}
	return b, nil
}

// readRuleFile reads a regular file without following a final symlink.
func readRuleFile(p string, limit int64) ([]byte, error) {
	return readRuleFileAt(unix.AT_FDCWD, p, p, limit)
}

// readRuleFileAt is readRuleFile of name beneath dirfd; p names it in
// errors.
func readRuleFileAt(dirfd int, name, p string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: p, Err: fs.ErrNotExist}
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, limit)
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// ParseIndex returns the paths recorded in a Git index (versions 2–4).
func ParseIndex(b []byte) ([]string, error) {
	paths, _, err := ParseIndexEntries(b)
	return paths, err
}

// ParseIndexEntries is ParseIndex that also returns, apart, the paths of
// the gitlink entries (submodules, mode 160000).
func ParseIndexEntries(b []byte) (paths, gitlinks []string, err error) {
	if len(b) < 12 || string(b[:4]) != "DIRC" {
		return nil, nil, errors.New("not a Git index (no DIRC signature)")
	}
	ver := binary.BigEndian.Uint32(b[4:8])
	if ver < 2 || ver > 4 {
		return nil, nil, fmt.Errorf("unsupported Git index version %d", ver)
	}
	// The index is the sandbox's to write: what it claims is bounded by
	// what it holds before anything is allocated for it.
	n := binary.BigEndian.Uint32(b[8:12])
	if uint64(n) > uint64(len(b)-12)/minIndexEntry {
		return nil, nil, fmt.Errorf("the Git index claims %d entries but its %d bytes hold at most %d", n, len(b), (len(b)-12)/minIndexEntry)
	}
	off := 12
	out := make([]string, 0, n)
	prev := ""
	// Version 4 compresses each path against the previous one: a real
	// index expands a few times at most, a crafted one quadratically.
	total, pathsLimit := 0, min(maxIndexPaths, max(8*len(b), 64<<20))
	for i := uint32(0); i < n; i++ {
		start := off
		if off+62 > len(b) {
			return nil, nil, errors.New("truncated index entry")
		}
		mode := binary.BigEndian.Uint32(b[off+24 : off+28])
		flags := binary.BigEndian.Uint16(b[off+60 : off+62])
		off += 62
		if ver >= 3 && flags&0x4000 != 0 {
			off += 2
		}
		var name string
		if ver == 4 {
			strip, k := indexVarint(b[off:])
			if k == 0 || int(strip) > len(prev) {
				return nil, nil, errors.New("bad prefix compression in index")
			}
			off += k
			end := bytes.IndexByte(b[off:], 0)
			if end < 0 {
				return nil, nil, errors.New("truncated index path")
			}
			name = prev[:len(prev)-int(strip)] + string(b[off:off+end])
			off += end + 1
		} else {
			end := bytes.IndexByte(b[off:], 0)
			if end < 0 {
				return nil, nil, errors.New("truncated index path")
			}
			name = string(b[off : off+end])
			off += end + 1
			// Entries are NUL-padded to a multiple of 8 bytes.
			off = start + (off-start+7)&^7
		}
		if total += len(name); total > pathsLimit {
			return nil, nil, fmt.Errorf("the Git index's paths add up to more than %d bytes by entry %d of its %d bytes: it is not an index Git wrote (on the host, `git status` says so; `rm .git/index && git reset` rebuilds it)", pathsLimit, i, len(b))
		}
		prev = name
		if mode&0o170000 == 0o040000 { // sparse-index directory entry
			name = strings.TrimSuffix(name, "/")
		}
		out = append(out, name)
		if mode&0o170000 == 0o160000 {
			gitlinks = append(gitlinks, name)
		}
	}
	return out, gitlinks, nil
}

// indexVarint decodes Git's offset varint; k is 0 on malformed input.
func indexVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	v := uint64(c & 127)
	k := 1
	for c&128 != 0 {
		if k >= len(b) || k > 9 {
			return 0, 0
		}
		v++
		c = b[k]
		v = (v << 7) + uint64(c&127)
		k++
	}
	return v, k
}

// ExcludesFile resolves core.excludesFile the way Git does for the
// developer: the repository's config, then the global config files
// ($XDG_CONFIG_HOME/git/config, ~/.gitconfig; the later wins), defaulting
// to $XDG_CONFIG_HOME/git/ignore. home and xdg may be empty.
func ExcludesFile(gitdir, home, xdg string) string {
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	val := ""
	var files []string
	if xdg != "" {
		files = append(files, filepath.Join(xdg, "git", "config"))
	}
	if home != "" {
		files = append(files, filepath.Join(home, ".gitconfig"))
	}
	for _, f := range append(files, filepath.Join(gitdir, "config")) {
		b, err := readRuleFile(f, maxRuleFile)
		if err != nil {
			continue
		}
		if v, ok := coreExcludesFile(b); ok {
			val = v
		}
	}
	if val == "" {
		if xdg == "" {
			return ""
		}
		return filepath.Join(xdg, "git", "ignore")
	}
	if strings.HasPrefix(val, "~/") && home != "" {
		val = filepath.Join(home, val[2:])
	}
	if !filepath.IsAbs(val) {
		return "" // relative to an unknown cwd: Git would not find it reliably either
	}
	return val
}

// coreExcludesFile extracts core.excludesFile from a git config file
// (simple syntax: [core] section, key = value, optional quotes).
func coreExcludesFile(b []byte) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	inCore := false
	val, found := "", false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			sec := strings.ToLower(strings.TrimSpace(strings.Trim(line, "[]")))
			inCore = sec == "core"
			continue
		}
		if !inCore {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "excludesfile") {
			continue
		}
		v = strings.TrimSpace(v)
		v = strings.Trim(v, "\"")
		val, found = v, true
	}
	return val, found
}
