package hostcheck

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/trusteddir"
)

// RecordFormat is the version of the host qualification record encoding
// this build reads and writes; a record of a newer format is refused.
const RecordFormat = 1

// maxRecordBytes bounds one record file (the suite's output is ~60 KiB).
const maxRecordBytes = 4 << 20

// QualifyCommand is the one command that qualifies the running build.
const QualifyCommand = "lazaret kernel qualify"

// Record is a host qualification record: the exact build a run of the
// kernel qualification suite passed on, where and by what it ran, and the
// suite's full output. It is trusted host configuration (spec §3.2): it is
// read only from a RecordDir whose every component only root or the
// developer can write.
type Record struct {
	Format  int    `json:"format"`
	Release string `json:"release"`
	Version string `json:"version"`
	Machine string `json:"machine"`
	// BootID is the boot the suite ran in (the record holds for the build,
	// not the boot: the per-boot support probe runs at every boot anyway).
	BootID      string    `json:"boot_id"`
	QualifiedAt time.Time `json:"qualified_at"`
	// Lazaret is the product version that ran the suite.
	Lazaret string `json:"lazaret_version"`
	// Suite names the suite's registered operation sequence.
	Suite  string `json:"suite"`
	Output string `json:"output"`

	// Path is where the record was read (not encoded).
	Path string `json:"-"`
}

// Uname is the build the record qualifies.
func (r Record) Uname() Uname {
	return Uname{Release: r.Release, Version: r.Version, Machine: r.Machine}
}

// String names the record's build and file.
func (r Record) String() string {
	return fmt.Sprintf("%s (%s %s %s, qualified %s by Lazaret %s)", r.Path, r.Release, r.Version, r.Machine, r.QualifiedAt.UTC().Format("2006-01-02"), r.Lazaret)
}

// RecordScope says whose a record directory is.
type RecordScope string

const (
	// ScopeSystem is /etc/lazaret/kernels.d, written as root, trusted for
	// every user.
	ScopeSystem RecordScope = "system"
	// ScopeUser is the developer's $XDG_CONFIG_HOME/lazaret/kernels.d.
	ScopeUser RecordScope = "user"
)

// SystemRecordPath is the system-wide record directory.
var SystemRecordPath = "/etc/lazaret/kernels.d"

// RecordDir is one directory of host qualification records and the uid
// (besides root) trusted to write it.
type RecordDir struct {
	Path  string
	Owner int
	Scope RecordScope
}

// SystemRecordDir is the system-wide directory: root alone is trusted.
func SystemRecordDir() RecordDir {
	return RecordDir{Path: SystemRecordPath, Owner: 0, Scope: ScopeSystem}
}

// UserRecordDir is uid's per-user directory under $XDG_CONFIG_HOME (or
// $HOME/.config). ok is false when neither variable is set.
func UserRecordDir(getenv func(string) string, uid int) (RecordDir, bool) {
	base := getenv("XDG_CONFIG_HOME")
	if base == "" || !filepath.IsAbs(base) {
		home := getenv("HOME")
		if home == "" || !filepath.IsAbs(home) {
			return RecordDir{}, false
		}
		base = filepath.Join(home, ".config")
	}
	return RecordDir{Path: filepath.Join(base, "lazaret", "kernels.d"), Owner: uid, Scope: ScopeUser}, true
}

// RecordDirs are the directories every check reads, system first.
func RecordDirs(getenv func(string) string, uid int) []RecordDir {
	dirs := []RecordDir{SystemRecordDir()}
	if uid != 0 {
		if d, ok := UserRecordDir(getenv, uid); ok {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// RecordFileName is the file a record of u is written to: the release and
// a digest of the whole build identity (uname -v has spaces and '#').
func RecordFileName(u Uname) string {
	sum := sha256.Sum256([]byte(u.Release + "\t" + u.Version + "\t" + u.Machine))
	rel := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, u.Release)
	return rel + "-" + hex.EncodeToString(sum[:6]) + ".json"
}

// DecodeRecord parses one record file's bytes.
func DecodeRecord(b []byte, path string) (Record, error) {
	var head struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Record{}, errdefs.Mark(fmt.Errorf("host qualification record %s is not valid JSON (%v): remove it and run `%s`", path, err, QualifyCommand), errdefs.ErrInvalid)
	}
	if head.Format > RecordFormat {
		return Record{}, errdefs.New(errdefs.ErrInvalid, "host qualification record %s has format %d, newer than this Lazaret reads (%d): upgrade Lazaret, or remove it and run `%s`", path, head.Format, RecordFormat, QualifyCommand)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.Format < 1 || r.Release == "" || r.Version == "" || r.Machine == "" || r.Suite == "" {
		return Record{}, errdefs.New(errdefs.ErrInvalid, "host qualification record %s is incomplete (format, release, version, machine and suite are required): remove it and run `%s`", path, QualifyCommand)
	}
	r.Path = path
	return r, nil
}

// EncodeRecord is the record's file contents.
func EncodeRecord(r Record) []byte {
	r.Format = RecordFormat
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// RecordSet is what the record directories held: valid records, and the
// refusals (untrusted directories or files, unreadable or invalid records)
// that a failed check reports.
type RecordSet struct {
	Records  []Record
	Refusals []error
}

// ReadRecords reads every *.json record in dirs. A directory that does not
// exist holds none. A directory or record inside one of sandboxWritable
// (host trees mounted writable into a sandbox, such as the workspace) is
// refused: a sandbox could have written it.
func ReadRecords(dirs []RecordDir, sandboxWritable []string) RecordSet {
	var set RecordSet
	for _, rd := range dirs {
		if _, err := os.Lstat(rd.Path); errors.Is(err, os.ErrNotExist) {
			continue
		}
		d, err := trusteddir.Open(rd.Path, rd.Owner)
		if err != nil {
			set.Refusals = append(set.Refusals, fmt.Errorf("%s records: %w", rd.Scope, err))
			continue
		}
		if tree := within(d.Path(), sandboxWritable); tree != "" {
			set.Refusals = append(set.Refusals, errdefs.New(errdefs.ErrRefused, "%s records: %s is inside %s, which the sandbox can write: qualify with `%s --system` as root instead, or use a configuration directory outside the workspace", rd.Scope, d.Path(), tree, QualifyCommand))
			d.Close()
			continue
		}
		names, err := d.Names()
		if err != nil {
			set.Refusals = append(set.Refusals, fmt.Errorf("%s records: list %s: %w", rd.Scope, d.Path(), err))
		}
		sort.Strings(names)
		for _, n := range names {
			if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, ".") {
				continue
			}
			p := filepath.Join(d.Path(), n)
			b, err := d.ReadFile(n, maxRecordBytes)
			if err != nil {
				set.Refusals = append(set.Refusals, err)
				continue
			}
			r, err := DecodeRecord(b, p)
			if err != nil {
				set.Refusals = append(set.Refusals, err)
				continue
			}
			set.Records = append(set.Records, r)
		}
		d.Close()
	}
	return set
}

// within returns the tree of trees that holds p ("" when none).
func within(p string, trees []string) string {
	for _, t := range trees {
		if t == "" {
			continue
		}
		if c, err := filepath.EvalSymlinks(t); err == nil {
			t = c
		}
		if p == t || strings.HasPrefix(p, strings.TrimSuffix(t, "/")+"/") {
			return t
		}
	}
	return ""
}

// WriteRecord writes r into dir (creating it: mode 0755, so every user
// can read a system record) and returns the file's path.
func WriteRecord(dir RecordDir, r Record) (string, error) {
	d, err := trusteddir.MkdirAll(dir.Path, dir.Owner, 0o755)
	if err != nil {
		return "", fmt.Errorf("host qualification records %s: %w", dir.Path, err)
	}
	defer d.Close()
	name := RecordFileName(r.Uname())
	if err := d.WriteFile(name, EncodeRecord(r), 0o644); err != nil {
		return "", err
	}
	return filepath.Join(d.Path(), name), nil
}
