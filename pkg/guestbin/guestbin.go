// Package guestbin installs the guest binaries (lazaret-init and
// lazaret-escalate, about 10 MB) into a generation's control mount source.
//
// The guest runs its own copy, never the installed file: a developer who
// reinstalls Lazaret in place (cp over the binary) must not change the
// pages of a running sandbox's init. Copying them into every generation
// cost ~10 ms of the coordinator's CPU in the busiest window of a cold
// start (and, without XDG_RUNTIME_DIR, 10 MB written to disk per start).
// So the copy is made once per build of the sources, in the runtime root,
// and every generation's control mount gets hard links to it:
//
//	<runtime root>/.guest-bin/<key>/lazaret-init      one copy per build
//	<runtime root>/.guest-bin/<key>/lazaret-escalate
//	<runtime dir>/control/bin/lazaret-init            a hard link to it
//
// The key is a digest of each source's name, device, inode, size,
// modification and change times, so an in-place rewrite of a source (which
// changes its ctime) yields a new copy. A copy is written into a temporary
// directory, synced and renamed into place, so a crash leaves either no
// entry or a complete one; an entry whose files are not the sources' sizes
// is replaced. When a new entry is made, the others whose files are linked
// nowhere else (link count 1, so no running generation uses them) are
// removed. A link that cannot be made (another file system, a concurrent
// removal) falls back to a copy, and so does a cache that cannot be
// written: the cache only saves work, a start never fails for it.
//
// The cache is not a Domain's: `lazaret rm --all` removes it, and nothing
// reads it but Install.
package guestbin

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Dir is the cache's name in the runtime root.
const Dir = ".guest-bin"

// tmpPrefix names an entry being written; one older than staleTmp is a
// crashed writer's and is removed.
const (
	tmpPrefix = ".tmp-"
	staleTmp  = 10 * time.Minute
)

// Source is one guest binary: its name in the control mount and its
// installed path.
type Source struct {
	Name, Path string
}

// Result says how Install placed the files.
type Result struct {
	Key    string // the cache entry of this build
	Made   bool   // the entry was written by this call
	Linked bool   // every file is a hard link to the entry (else copies)
	// CacheErr is why the entry could not be made (the files were copied
	// into dst instead).
	CacheErr error
}

// link is os.Link (a variable for fault injection in tests).
var link = os.Link

// Install places every source at dst/<name> (mode 0755), linked to the
// cache entry of this build beneath runtimeRoot, and returns how. now
// dates the removal of crashed writers' temporary directories.
func Install(runtimeRoot, dst string, srcs []Source, now func() time.Time) (Result, error) {
	key, sizes, err := keyOf(srcs)
	if err != nil {
		return Result{}, err
	}
	cache := filepath.Join(runtimeRoot, Dir)
	entry := filepath.Join(cache, key)
	res := Result{Key: key}
	if !complete(entry, srcs, sizes) {
		if res.CacheErr = writeEntry(cache, entry, srcs, sizes); res.CacheErr == nil {
			res.Made = true
			collect(cache, key, now)
		}
	}
	res.Linked = true
	for _, s := range srcs {
		to := filepath.Join(dst, s.Name)
		if res.CacheErr == nil {
			if err := link(filepath.Join(entry, s.Name), to); err == nil {
				continue
			}
		}
		res.Linked = false
		if err := copyExecutable(s.Path, to, false); err != nil {
			return Result{}, fmt.Errorf("install %s into %s: %w", s.Name, dst, err)
		}
	}
	return res, nil
}

// keyOf digests the identity of every source.
func keyOf(srcs []Source) (string, []int64, error) {
	h := sha256.New()
	sizes := make([]int64, len(srcs))
	for i, s := range srcs {
		if s.Name == "" || strings.ContainsAny(s.Name, "/\x00") || s.Name == "." || s.Name == ".." {
			return "", nil, fmt.Errorf("guest binary name %q: want a plain file name", s.Name)
		}
		fi, err := os.Stat(s.Path)
		if err != nil {
			return "", nil, fmt.Errorf("guest binary %s: %w", s.Name, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.Mode().IsRegular() {
			return "", nil, fmt.Errorf("guest binary %s: %s is not a regular file: reinstall Lazaret", s.Name, s.Path)
		}
		sizes[i] = fi.Size()
		var b [8]byte
		h.Write([]byte(s.Name))
		h.Write([]byte{0})
		for _, v := range []uint64{st.Dev, st.Ino, uint64(st.Size), uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec)} {
			binary.BigEndian.PutUint64(b[:], v)
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), sizes, nil
}

// complete reports whether entry holds every source as a regular file of
// the source's size.
func complete(entry string, srcs []Source, sizes []int64) bool {
	for i, s := range srcs {
		fi, err := os.Lstat(filepath.Join(entry, s.Name))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != sizes[i] {
			return false
		}
	}
	return true
}

// writeEntry writes the cache entry: copies in a temporary directory,
// synced, renamed into place (replacing an incomplete entry; a concurrent
// writer's complete one wins).
func writeEntry(cache, entry string, srcs []Source, sizes []int64) (err error) {
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return fmt.Errorf("guest binary cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, tmpPrefix)
	if err != nil {
		return fmt.Errorf("guest binary cache: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("guest binary cache: %w", err)
	}
	for _, s := range srcs {
		if err := copyExecutable(s.Path, filepath.Join(tmp, s.Name), true); err != nil {
			return fmt.Errorf("guest binary cache: copy %s: %w", s.Name, err)
		}
	}
	if err := syncDir(tmp); err != nil {
		return fmt.Errorf("guest binary cache: %w", err)
	}
	if err := os.Rename(tmp, entry); err != nil {
		if !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.ENOTEMPTY) {
			return fmt.Errorf("guest binary cache: %w", err)
		}
		// An entry is there: a concurrent writer's (complete, it was
		// renamed whole) or an incomplete one, moved aside and replaced.
		if complete(entry, srcs, sizes) {
			os.RemoveAll(tmp)
			return nil
		}
		aside := tmp + "-old"
		if err := os.Rename(entry, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("guest binary cache: replace %s: %w", entry, err)
		}
		os.RemoveAll(aside)
		if err := os.Rename(tmp, entry); err != nil {
			return fmt.Errorf("guest binary cache: %w", err)
		}
	}
	return syncDir(cache)
}

// collect removes the other entries no generation links to, and crashed
// writers' temporary directories.
func collect(cache, keep string, now func() time.Time) {
	ents, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(cache, name)
		if name == keep || !e.IsDir() {
			continue
		}
		if strings.HasPrefix(name, tmpPrefix) {
			if fi, err := e.Info(); err == nil && now().Sub(fi.ModTime()) > staleTmp {
				os.RemoveAll(p)
			}
			continue
		}
		if unused(p) {
			os.RemoveAll(p)
		}
	}
}

// unused reports whether no file of the entry has another link.
func unused(entry string) bool {
	files, err := os.ReadDir(entry)
	if err != nil {
		return false
	}
	for _, f := range files {
		fi, err := f.Info()
		if err != nil {
			return false
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Nlink > 1 {
			return false
		}
	}
	return true
}

// copyExecutable copies src to dst (mode 0755) through a temporary name,
// synced when durable (a cache entry outlives the generation; a fallback
// copy in the control mount does not).
func copyExecutable(src, dst string, durable bool) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = io.Copy(out, in); err != nil {
		return err
	}
	if err = out.Chmod(0o755); err != nil {
		return err
	}
	if durable {
		if err = out.Sync(); err != nil {
			return err
		}
	}
	if err = out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Remove deletes the cache beneath runtimeRoot (`lazaret rm --all`). A
// generation installing meanwhile copies instead of linking.
func Remove(runtimeRoot string) error {
	if err := os.RemoveAll(filepath.Join(runtimeRoot, Dir)); err != nil {
		return fmt.Errorf("remove the guest binary cache: %w", err)
	}
	return nil
}
