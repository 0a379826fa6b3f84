// Package domain derives a Domain's identity and its host paths.
//
// A Domain is the (Agent Profile, canonical Agent Workspace) pair (spec §2).
// Its Domain ID is derived deterministically from both (FR-1). Paths are built
// only from validated roots (SR-11) and are lookup hints, never ownership
// proofs: every directory Lazaret relies on is checked to be a real directory
// owned by the developer with no group or other access (SR-10).
//
// Layout:
//
//	$XDG_STATE_HOME/lazaret/                 Storage Root (0700)
//	    prepared/<artifact-id>/              prepared lowers (package prepare)
//	    domains/<domain-id>/                 Domain Root (0700)
//	        domain.json                      stored Domain identity (verified before reuse)
//	        lifecycle.lock                   Domain flock: held by the Host Coordinator
//	        hc.log                           last generation's coordinator log
//	$XDG_RUNTIME_DIR/lazaret/<domain-id>/    runtime dir (0700; fallback $XDG_STATE_HOME/lazaret/run)
//	    control.sock                         Host Coordinator protocol face
//	    runsc/                               runsc --root state
//	    bundle/                              OCI bundle (rootfs mounted only in RS's namespace)
//	    control/                             source of the sandbox's fixed control mount
//	$XDG_RUNTIME_DIR/lazaret/.guest-bin/     guest binaries, one copy per build (package guestbin)
package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ID is a Domain ID: 32 lower-case hex digits.
type ID string

// Valid reports whether id has the Domain ID form.
func (id ID) Valid() bool { return IsLowerHex(string(id), 32) }

// IsLowerHex reports whether s is exactly n lower-case hex digits. (No
// regexp is compiled at init in this package: it is linked into the
// in-sandbox Escalation Client, whose start is on the escalation path.)
func IsLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DeriveID returns the Domain ID of (profile, canonical workspace) (FR-1).
func DeriveID(profile, workspace string) ID {
	h := sha256.New()
	h.Write([]byte("lazaret/v1/domain-id\x00"))
	h.Write([]byte(profile))
	h.Write([]byte{0})
	h.Write([]byte(workspace))
	return ID(hex.EncodeToString(h.Sum(nil))[:32])
}

// ValidProfileName reports whether name can name an Agent Profile:
// ^[a-z0-9][a-z0-9._-]{0,62}$.
func ValidProfileName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// Workspace is a resolved Agent Workspace.
type Workspace struct {
	// Root is the canonical (symlink-resolved) workspace directory: the top
	// level of the Git repository containing the start directory, or the
	// start directory itself when it is not in a repository.
	Root string
	// Subdir is the start directory relative to Root ("" at the top).
	Subdir string
	// Git reports whether Root is a Git work tree top level.
	Git bool
}

// ResolveWorkspace resolves the Agent Workspace for start directory dir.
// home is the developer's home directory, which is refused as a workspace
// (it would expose every dotfile and credential to the sandbox).
func ResolveWorkspace(dir, home string) (Workspace, error) {
	canon, err := filepath.EvalSymlinks(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Workspace{}, errdefs.New(errdefs.ErrInvalid, "the start directory %s does not exist: run lazaret inside a project directory, or pass one with -C", dir)
	case errors.Is(err, fs.ErrPermission):
		return Workspace{}, errdefs.New(errdefs.ErrInvalid, "the start directory %s cannot be reached (%v): run lazaret in a project directory you can read and enter", dir, err)
	case err != nil:
		return Workspace{}, errdefs.Mark(fmt.Errorf("resolve workspace %q: %w", dir, err), errdefs.ErrInvalid)
	}
	canon, err = filepath.Abs(canon)
	if err != nil {
		return Workspace{}, errdefs.Mark(fmt.Errorf("resolve workspace %q: %w", dir, err), errdefs.ErrInvalid)
	}
	st, err := os.Stat(canon)
	if err != nil {
		return Workspace{}, errdefs.Mark(fmt.Errorf("resolve workspace: %w", err), errdefs.ErrInvalid)
	}
	if !st.IsDir() {
		return Workspace{}, errdefs.New(errdefs.ErrInvalid, "the start directory %s is not a directory: run lazaret inside a project directory, or pass one with -C", canon)
	}
	root, isGit := canon, false
	for d := canon; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			root, isGit = d, true
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if root == "/" {
		return Workspace{}, errdefs.New(errdefs.ErrRefused, "refusing / as the Agent Workspace: run lazaret inside a project directory")
	}
	if home != "" {
		if h, err := filepath.EvalSymlinks(home); err == nil && h == root {
			return Workspace{}, errdefs.New(errdefs.ErrRefused, "refusing your home directory %s as the Agent Workspace (it would expose your dotfiles and credentials): run lazaret inside a project directory", root)
		}
	}
	// The workspace is shared with the sandbox as the developer: a tree
	// they cannot list and enter is refused here, not by the Git or mount
	// step that would fail on it later.
	if err := readableDir(root); err != nil {
		return Workspace{}, errdefs.New(errdefs.ErrInvalid, "the Agent Workspace %s cannot be read and entered by you (%v): run lazaret in a project directory you own, or fix its permissions", root, err)
	}
	sub, err := filepath.Rel(root, canon)
	if err != nil {
		return Workspace{}, errdefs.Mark(fmt.Errorf("resolve workspace: %w", err), errdefs.ErrInternal)
	}
	if sub == "." {
		sub = ""
	}
	return Workspace{Root: root, Subdir: sub, Git: isGit}, nil
}

// readableDir reports why the calling user cannot list and enter
// directory d, or nil.
func readableDir(d string) error {
	f, err := os.Open(d)
	if err != nil {
		return err
	}
	_, err = f.Readdirnames(1)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = os.Lstat(filepath.Join(d, "."))
	return err
}

// Roots are the developer's Lazaret base directories.
type Roots struct {
	Storage string // Storage Root
	Runtime string // runtime root (per-Domain runtime dirs beneath)
}

// DefaultRoots computes the roots from the XDG environment of uid.
// getenv is os.Getenv in production.
func DefaultRoots(getenv func(string) string, uid int) (Roots, error) {
	home := getenv("HOME")
	state := getenv("XDG_STATE_HOME")
	if state == "" {
		if home == "" {
			return Roots{}, errdefs.New(errdefs.ErrInvalid, "neither XDG_STATE_HOME nor HOME is set: set HOME to your home directory")
		}
		state = filepath.Join(home, ".local", "state")
	}
	if !filepath.IsAbs(state) {
		return Roots{}, errdefs.New(errdefs.ErrInvalid, "XDG_STATE_HOME=%q is not absolute: set it to an absolute path or unset it", state)
	}
	runtime := getenv("XDG_RUNTIME_DIR")
	var rt string
	if runtime != "" && filepath.IsAbs(runtime) {
		rt = filepath.Join(runtime, "lazaret")
	} else {
		// Not /tmp: a predictable name there can be created first by
		// another local user (su, sudo, cron and CI have no runtime dir).
		rt = filepath.Join(state, "lazaret", "run")
	}
	return Roots{Storage: filepath.Join(state, "lazaret"), Runtime: rt}, nil
}

// Paths are one Domain's host paths.
type Paths struct {
	ID          ID
	StorageRoot string
	DomainRoot  string
	RuntimeDir  string
}

// maxSocketPath is sun_path's capacity less the terminating NUL.
const maxSocketPath = 107

// PathsFor lays out Domain id beneath roots.
func PathsFor(r Roots, id ID) (Paths, error) {
	if !id.Valid() {
		return Paths{}, errdefs.New(errdefs.ErrInvalid, "malformed Domain ID %q", id)
	}
	p := Paths{
		ID:          id,
		StorageRoot: r.Storage,
		DomainRoot:  filepath.Join(r.Storage, "domains", string(id)),
		RuntimeDir:  filepath.Join(r.Runtime, string(id)),
	}
	if n := len(p.ControlSocket()); n > maxSocketPath {
		return Paths{}, errdefs.New(errdefs.ErrUnsupportedHost, "control socket path %s is %d bytes, over the unix socket limit of %d: set XDG_RUNTIME_DIR to a shorter directory", p.ControlSocket(), n, maxSocketPath)
	}
	return p, nil
}

// Names in the Domain runtime directory that the Host Coordinator creates
// and a Client CLI opens (beneath the verified directory descriptor, so by
// name rather than by path).
const (
	// ControlSocketName is the Host Coordinator's control socket.
	ControlSocketName = "control.sock"
	// PublicationName is the generation's publication (CA, Trust Manifest
	// and coordinator leaf): what CLIs pin to authenticate the Host
	// Coordinator. It holds no private key.
	PublicationName = "publication.json"
)

// ControlSocket is the Host Coordinator's protocol face.
func (p Paths) ControlSocket() string { return filepath.Join(p.RuntimeDir, ControlSocketName) }

// Publication is the generation's publication file.
func (p Paths) Publication() string { return filepath.Join(p.RuntimeDir, PublicationName) }

// LockFile is the Domain lifecycle lock.
func (p Paths) LockFile() string { return filepath.Join(p.DomainRoot, "lifecycle.lock") }

// Log is the Host Coordinator's log of the current or last generation.
func (p Paths) Log() string { return filepath.Join(p.DomainRoot, "hc.log") }

// NetworkDenials is the Domain's bounded log of refused egress (the
// allowlist mode's proxy writes it; `lazaret network log` reads it).
func (p Paths) NetworkDenials() string { return filepath.Join(p.DomainRoot, "network-denials.log") }

// RunscRoot is runsc's --root state directory for the Domain.
func (p Paths) RunscRoot() string { return filepath.Join(p.RuntimeDir, "runsc") }

// BundleDir is the OCI bundle directory.
func (p Paths) BundleDir() string { return filepath.Join(p.RuntimeDir, "bundle") }

// ControlMountSource is the host source of the sandbox's fixed control mount.
func (p Paths) ControlMountSource() string { return filepath.Join(p.RuntimeDir, "control") }

// EnsurePrivateDir creates dir (and missing parents, each 0700) and verifies
// that dir is a real directory owned by uid with no group/other permission
// (SR-10). An existing dir with wrong owner or mode is refused, not fixed.
func EnsurePrivateDir(dir string, uid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errdefs.Mark(fmt.Errorf("create private directory: %w", err), errdefs.ErrUnsupportedHost)
	}
	return VerifyPrivateDir(dir, uid)
}

// VerifyPrivateDir checks dir as EnsurePrivateDir does, without creating it.
func VerifyPrivateDir(dir string, uid int) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("check private directory: %w", err), errdefs.ErrUnsupportedHost)
	}
	if st.Mode()&fs.ModeSymlink != 0 || !st.IsDir() {
		return errdefs.New(errdefs.ErrRefused, "%s is not a directory (a symlink or file is there): remove it and retry", dir)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != uid {
		return errdefs.New(errdefs.ErrRefused, "%s is owned by uid %d, not by you (uid %d): remove it or fix its owner", dir, sys.Uid, uid)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return errdefs.New(errdefs.ErrRefused, "%s has mode %04o; Lazaret needs it private: run chmod 700 %s", dir, st.Mode().Perm(), dir)
	}
	return nil
}

// identityVersion is the version of domain.json; newer versions are refused.
const identityVersion = 1

// StoredIdentity is the Domain identity recorded in the Domain Root.
type StoredIdentity struct {
	Version   int    `json:"version"`
	DomainID  ID     `json:"domain_id"`
	Profile   string `json:"profile"`
	Workspace string `json:"workspace"`
}

// VerifyOrRecordIdentity checks the stored identity in DomainRoot against
// (id, profile, workspace), recording it on first use (SR-11).
func VerifyOrRecordIdentity(p Paths, profile, workspace string) error {
	file := filepath.Join(p.DomainRoot, "domain.json")
	want := StoredIdentity{Version: identityVersion, DomainID: p.ID, Profile: profile, Workspace: workspace}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return writeFileAtomic(file, mustJSON(want))
	}
	if err != nil {
		return errdefs.Mark(fmt.Errorf("read Domain identity: %w", err), errdefs.ErrUnsupportedHost)
	}
	var got StoredIdentity
	if err := json.Unmarshal(b, &got); err != nil {
		return errdefs.New(errdefs.ErrCorrupt, "Domain identity %s is corrupt (%v): `lazaret rm --domain %s` removes this Domain's state (State Anchors, Ignored Workspace State, store and log; copy %s first to inspect it), and the next run starts it afresh", file, err, p.ID, p.DomainRoot)
	}
	if got.Version > identityVersion {
		return errdefs.New(errdefs.ErrRefused, "Domain identity %s has version %d, newer than this Lazaret understands (%d): upgrade Lazaret", file, got.Version, identityVersion)
	}
	if got != want {
		return errdefs.New(errdefs.ErrRefused, "Domain Root %s belongs to profile %q workspace %q, not profile %q workspace %q: refusing to reuse it; move it aside", p.DomainRoot, got.Profile, got.Workspace, profile, workspace)
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// writeFileAtomic writes data to file by write, fsync, rename, fsync dir.
func writeFileAtomic(file string, data []byte) error {
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer d.Close()
	return d.Sync()
}

// SanitizeHostname turns a workspace base name into a valid host name label.
func SanitizeHostname(base string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == "" {
		s = "workspace"
	}
	if len(s) > 40 {
		s = strings.Trim(s[:40], "-")
	}
	return "lazaret-" + s
}
