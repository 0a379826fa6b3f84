// Package guestuser makes an Agent Profile's session user exist in the
// guest: the sandbox's init (package sandboxinit) calls Ensure as guest
// root before it reports ready, so the first session can already run as
// that user. What Ensure writes (/etc/passwd, /etc/group, /etc/shadow and
// the home directory) lies under the default State Anchors /etc and /home,
// so the user is created once per Domain and kept across restarts.
//
// The rules, in the words the errors use:
//
//   - a user of that name in the image is used if its uid is the
//     configured one; another uid is an error naming the user_id to set;
//   - a home directory that exists but belongs to root (the mount-point
//     chain of a bind beneath it, such as a profile path ~/.claude, makes
//     the Runtime Supervisor provide it root-owned) is given to the user and
//     filled from /etc/skel where entries are missing;
//   - a missing user is added with uid = gid = the configured id, home
//     /home/<name> and /bin/bash (or /bin/sh) as shell, unless another
//     user already has that uid (an error naming that user);
//   - a group with the gid is reused, otherwise one named like the user
//     is added; a missing home directory is created from /etc/skel.
//
// Files are replaced by rename of a complete temporary file, keeping their
// mode and owner, so an interrupted start leaves either the old or the new
// database. It runs inside gVisor only and links nothing host-side.
package guestuser

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// User is the session user to ensure.
type User struct {
	Name     string
	UID, GID uint32
}

// Home is the user's home directory.
func (u User) Home() string { return "/home/" + u.Name }

// Parse reads the NAME:UID:GID form of the init's --user flag.
func Parse(s string) (User, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 || f[0] == "" {
		return User{}, fmt.Errorf("session user %q is not NAME:UID:GID", s)
	}
	uid, err1 := strconv.ParseUint(f[1], 10, 32)
	gid, err2 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil || uid == 0 || gid == 0 {
		return User{}, fmt.Errorf("session user %q: uid and gid must be positive numbers", s)
	}
	return User{Name: f[0], UID: uint32(uid), GID: uint32(gid)}, nil
}

// String is the flag form Parse reads.
func (u User) String() string { return fmt.Sprintf("%s:%d:%d", u.Name, u.UID, u.GID) }

// ErrConflict marks an image whose users contradict the profile.
var ErrConflict = errors.New("the image's users conflict with the profile's user")

// entry is one line of a colon-separated database.
type entry []string

func readDB(path string) ([]entry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out, sc.Err()
}

// Ensure makes u exist beneath root ("/" in the sandbox). It reports
// whether it changed anything.
func Ensure(root string, u User, now time.Time) (bool, error) {
	etc := filepath.Join(root, "etc")
	passwd, err := readDB(filepath.Join(etc, "passwd"))
	if err != nil {
		return false, fmt.Errorf("read /etc/passwd: %w", err)
	}
	changed := false
	var have entry
	for _, e := range passwd {
		if len(e) < 7 {
			continue
		}
		if e[0] == u.Name {
			have = e
			break
		}
	}
	if have != nil {
		if have[2] != strconv.FormatUint(uint64(u.UID), 10) {
			return false, fmt.Errorf("%w: the image's user %s has uid %s, the profile says %d: set user_id = %s in the profile (or choose another user name)", ErrConflict, u.Name, have[2], u.UID, have[2])
		}
	} else {
		for _, e := range passwd {
			if len(e) >= 3 && e[2] == strconv.FormatUint(uint64(u.UID), 10) {
				return false, fmt.Errorf("%w: uid %d is the image's user %s: set user = %q in the profile, or another user_id", ErrConflict, u.UID, e[0], e[0])
			}
		}
		if err := ensureGroup(etc, u); err != nil {
			return false, err
		}
		shell := "/bin/sh"
		if _, err := os.Stat(filepath.Join(root, "bin/bash")); err == nil {
			shell = "/bin/bash"
		}
		line := fmt.Sprintf("%s:x:%d:%d::%s:%s", u.Name, u.UID, u.GID, u.Home(), shell)
		if err := appendLine(filepath.Join(etc, "passwd"), line, 0o644); err != nil {
			return false, err
		}
		if _, err := os.Lstat(filepath.Join(etc, "shadow")); err == nil {
			days := now.Unix() / 86400
			if err := appendLine(filepath.Join(etc, "shadow"), fmt.Sprintf("%s:!:%d:0:99999:7:::", u.Name, days), 0o640); err != nil {
				return false, err
			}
		}
		changed = true
	}
	made, err := ensureHome(root, u)
	return changed || made, err
}

// ensureGroup adds a group for u.GID unless one exists.
func ensureGroup(etc string, u User) error {
	groups, err := readDB(filepath.Join(etc, "group"))
	if err != nil {
		return fmt.Errorf("read /etc/group: %w", err)
	}
	gid := strconv.FormatUint(uint64(u.GID), 10)
	name := u.Name
	for _, g := range groups {
		if len(g) >= 3 && g[2] == gid {
			return nil
		}
		if len(g) >= 1 && g[0] == name {
			return fmt.Errorf("%w: the image's group %s has gid %s, not %s: set user_id = %s in the profile", ErrConflict, name, g[2], gid, g[2])
		}
	}
	if err := appendLine(filepath.Join(etc, "group"), fmt.Sprintf("%s:x:%s:", name, gid), 0o644); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(etc, "gshadow")); err == nil {
		return appendLine(filepath.Join(etc, "gshadow"), fmt.Sprintf("%s:!::", name), 0o640)
	}
	return nil
}

// appendLine replaces path by a copy with line appended (mode and owner
// kept, mode for a new file).
func appendLine(path, line string, mode fs.FileMode) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	uid, gid := 0, 0
	if st, err := os.Lstat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		mode = st.Mode().Perm()
		uid, gid = ownerOf(st)
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	data := append(old, line+"\n"...)
	tmp := path + ".lazaret-tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		os.Remove(tmp) // left by an interrupted start
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("update %s: %w", path, err)
	}
	return nil
}

// ensureHome creates u's home directory from /etc/skel when it is
// missing, and adopts one that belongs to root: a bind beneath the home
// (a profile path such as ~/.claude) needs its mount-point chain, which the
// Runtime Supervisor provides root-owned when the image lacks the home.
func ensureHome(root string, u User) (bool, error) {
	home := filepath.Join(root, u.Home())
	if st, err := os.Lstat(home); err == nil {
		if !st.IsDir() {
			return false, nil
		}
		if uid, _ := ownerOf(st); uid != 0 {
			return false, nil
		}
		// Adopt: the user's from now on, its mode that of a new home,
		// and /etc/skel's entries where missing (never replaced).
		if err := os.Chmod(home, 0o750); err != nil {
			return false, fmt.Errorf("chmod %s: %w", u.Home(), err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
			return false, err
		}
		if err := os.Mkdir(home, 0o750); err != nil {
			return false, fmt.Errorf("create %s: %w", u.Home(), err)
		}
	}
	skel := filepath.Join(root, "etc/skel")
	err := filepath.WalkDir(skel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == skel && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(skel, p)
		if rel == "." {
			return nil
		}
		dst := filepath.Join(home, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if _, err := os.Lstat(dst); err == nil {
			if d.IsDir() {
				return filepath.SkipDir // an adopted home's own entry, kept
			}
			return nil
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(dst, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(p, dst, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // no symlinks or special files from skel
		}
		return os.Lchown(dst, int(u.UID), int(u.GID))
	})
	if err != nil {
		return false, fmt.Errorf("populate %s from /etc/skel: %w", u.Home(), err)
	}
	if err := os.Chown(home, int(u.UID), int(u.GID)); err != nil {
		return false, fmt.Errorf("chown %s: %w", u.Home(), err)
	}
	return true, nil
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// ownerOf is the uid and gid of a file's FileInfo.
func ownerOf(st fs.FileInfo) (int, int) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), int(s.Gid)
	}
	return 0, 0
}
