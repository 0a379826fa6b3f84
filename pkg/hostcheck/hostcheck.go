// Package hostcheck verifies host prerequisites before any Domain resource
// exists, and turns each failure into an error that names the fix (DX-5).
// Probes read through injectable functions so tests can present any host.
package hostcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Host is the view of the machine the checks read.
type Host struct {
	Euid     int
	Uid      int
	Username string
	// Uname describes the running kernel.
	Uname func() (Uname, error)
	// ReadFile reads /etc/subuid, /etc/subgid, sysctls and os-release.
	ReadFile func(string) ([]byte, error)
	// OpenRW tries to open a device read-write.
	OpenRW func(string) error
	// LookPath finds a program.
	LookPath func(string) (string, error)
	// Stat stats a file.
	Stat func(string) (os.FileInfo, error)
	// FileCaps reads a file's permitted file capabilities (0 for none);
	// nil means none.
	FileCaps func(string) (uint64, error)
	// Records reads the host qualification records (ReadRecords of
	// RecordDirs in production), refusing any inside sandboxWritable.
	Records func(sandboxWritable []string) RecordSet
	// SandboxWritable are host trees a sandbox of the caller's Domain can
	// write (the workspace, writable volumes): no record is trusted there.
	SandboxWritable []string
}

// Real returns the running machine.
func Real(lookPath func(string) (string, error)) Host {
	h := Host{
		Euid:     os.Geteuid(),
		Uid:      os.Getuid(),
		Uname:    RunningUname,
		ReadFile: os.ReadFile,
		OpenRW: func(p string) error {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			return f.Close()
		},
		LookPath: lookPath,
		Stat:     os.Stat,
		FileCaps: realFileCaps,
	}
	uid := h.Uid
	h.Records = func(sandboxWritable []string) RecordSet {
		return ReadRecords(RecordDirs(os.Getenv, uid), sandboxWritable)
	}
	if u, err := user.LookupId(strconv.Itoa(h.Uid)); err == nil {
		h.Username = u.Username
	}
	return h
}

// MinKernel is the oldest kernel with pidfs (PidfsProcessIdentityV1).
var MinKernel = [2]int{6, 9}

// SubIDRange is one subordinate id range.
type SubIDRange struct {
	Start, Count uint32
}

// MinSubIDs is the size of the subordinate range Lazaret maps.
const MinSubIDs = 65536

// NotRoot refuses to run as root (rootless is the point).
func (h Host) NotRoot() error {
	if h.Euid == 0 {
		return errdefs.New(errdefs.ErrRefused, "refusing to run as root: Lazaret is rootless by design and maps your own user into the sandbox; run it as your normal user (as root, `make run` uses the demo user lazaret-demo)")
	}
	return nil
}

// Uname is the running kernel's build identity.
type Uname struct {
	Release string // uname -r
	Version string // uname -v (the build: number, flags, date)
	Machine string // uname -m
}

// Kernel checks for x86-64, Linux ≥ 6.9, and an exactly qualified build
// (spec §3.2: a release string or version floor never substitutes for
// qualification).
func (h Host) Kernel() error {
	_, err := h.KernelQualification()
	return err
}

// KernelQualification is Kernel that also says which source qualified the
// build: the embedded list or a host qualification record.
func (h Host) KernelQualification() (Qualification, error) {
	u, err := h.Uname()
	if err != nil {
		return Qualification{}, errdefs.Mark(fmt.Errorf("uname: %w", err), errdefs.ErrUnsupportedHost)
	}
	if err := Floor(u); err != nil {
		return Qualification{Uname: u}, err
	}
	return h.qualification(u)
}

// Floor checks what no qualification can lift: x86-64 and Linux ≥ 6.9.
func Floor(u Uname) error {
	rel, mach := u.Release, u.Machine
	if mach != "x86_64" {
		return errdefs.New(errdefs.ErrUnsupportedHost, "unsupported architecture %s: Lazaret supports only x86-64 (its pidfs process identity is qualified there)", mach)
	}
	maj, min, ok := parseRelease(rel)
	if !ok {
		return errdefs.New(errdefs.ErrUnsupportedHost, "cannot parse kernel release %q: Lazaret needs Linux %d.%d or later", rel, MinKernel[0], MinKernel[1])
	}
	if maj < MinKernel[0] || (maj == MinKernel[0] && min < MinKernel[1]) {
		return errdefs.New(errdefs.ErrUnsupportedHost, "kernel %s is too old: Lazaret needs Linux %d.%d or later for pidfs process identity; upgrade the kernel", rel, MinKernel[0], MinKernel[1])
	}
	return nil
}

// RunningUname reads the running kernel's build identity.
func RunningUname() (Uname, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Uname{}, err
	}
	return Uname{Release: unix.ByteSliceToString(u.Release[:]), Version: unix.ByteSliceToString(u.Version[:]), Machine: unix.ByteSliceToString(u.Machine[:])}, nil
}

func parseRelease(rel string) (int, int, bool) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minStr := parts[1]
	if i := strings.IndexFunc(minStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minStr = minStr[:i]
	}
	min, err2 := strconv.Atoi(minStr)
	return maj, min, err1 == nil && err2 == nil
}

// SubIDs returns the user's subordinate uid and gid ranges (the first range
// of at least MinSubIDs ids in each file).
func (h Host) SubIDs() (uids, gids SubIDRange, err error) {
	fix := fmt.Sprintf("add one as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s", h.nameOr())
	uids, err = h.subIDRange("/etc/subuid")
	if err != nil {
		return uids, gids, errdefs.Mark(fmt.Errorf("%w; %s", err, fix), errdefs.ErrUnsupportedHost)
	}
	gids, err = h.subIDRange("/etc/subgid")
	if err != nil {
		return uids, gids, errdefs.Mark(fmt.Errorf("%w; %s", err, fix), errdefs.ErrUnsupportedHost)
	}
	return uids, gids, nil
}

func (h Host) nameOr() string {
	if h.Username != "" {
		return h.Username
	}
	return strconv.Itoa(h.Uid)
}

func (h Host) subIDRange(file string) (SubIDRange, error) {
	b, err := h.ReadFile(file)
	if err != nil {
		return SubIDRange{}, fmt.Errorf("no subordinate id range for %s: %v", h.nameOr(), err)
	}
	return parseSubID(bytes.NewReader(b), h.Username, h.Uid, file)
}

func parseSubID(r io.Reader, name string, uid int, file string) (SubIDRange, error) {
	sc := bufio.NewScanner(r)
	small := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 3 || (f[0] != name && f[0] != strconv.Itoa(uid)) {
			continue
		}
		start, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		if count < MinSubIDs {
			small = true
			continue
		}
		return SubIDRange{Start: uint32(start), Count: MinSubIDs}, nil
	}
	if small {
		return SubIDRange{}, fmt.Errorf("%s gives %s fewer than %d subordinate ids", file, name, MinSubIDs)
	}
	return SubIDRange{}, fmt.Errorf("%s has no subordinate id range for %s", file, name)
}

// IDMapTools finds newuidmap and newgidmap, setuid root or granted
// CAP_SETUID / CAP_SETGID as a file capability (Fedora's form).
func (h Host) IDMapTools() (newuidmap, newgidmap string, err error) {
	find := func(name string, capBit uint, capName string) (string, error) {
		p, err := h.LookPath(name)
		if err != nil {
			return "", errdefs.New(errdefs.ErrUnsupportedHost, "%s not found: %s", name, h.InstallHint("newuidmap"))
		}
		st, err := h.Stat(p)
		if err != nil || (st.Mode()&os.ModeSetuid == 0 && !h.hasFileCap(p, capBit)) {
			return "", errdefs.New(errdefs.ErrUnsupportedHost, "%s is neither setuid root nor granted %s as a file capability: %s", p, capName, h.ReinstallHint("newuidmap"))
		}
		return p, nil
	}
	if newuidmap, err = find("newuidmap", capSetuid, "cap_setuid"); err != nil {
		return
	}
	newgidmap, err = find("newgidmap", capSetgid, "cap_setgid")
	return
}

// Tun checks that /dev/net/tun is usable by the developer (slirp4netns).
func (h Host) Tun() error {
	if err := h.OpenRW("/dev/net/tun"); err != nil {
		return errdefs.New(errdefs.ErrUnsupportedHost, "/dev/net/tun is not usable by you (%v): as root run `chmod 0666 /dev/net/tun` (the usual distribution default), or `make setup` in the Lazaret checkout", unwrapPath(err))
	}
	return nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// All runs every check the foundation needs, in order, stopping at the first
// failure.
func (h Host) All() error { return h.checks(h.Kernel) }

// AllButQualification is All with the kernel checked only against the
// floor (x86-64, Linux ≥ 6.9): for a caller that checks the exact build's
// qualification once it knows the sandbox-writable trees (Kernel with
// SandboxWritable set), without reading the records twice.
func (h Host) AllButQualification() error {
	return h.checks(func() error {
		u, err := h.Uname()
		if err != nil {
			return errdefs.Mark(fmt.Errorf("uname: %w", err), errdefs.ErrUnsupportedHost)
		}
		return Floor(u)
	})
}

func (h Host) checks(kernel func() error) error {
	for _, check := range []func() error{h.NotRoot, kernel, h.Tun} {
		if err := check(); err != nil {
			return err
		}
	}
	if _, _, err := h.SubIDs(); err != nil {
		return err
	}
	_, _, err := h.IDMapTools()
	return err
}
