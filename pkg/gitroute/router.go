package gitroute

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

// backend identifies where a path lives.
type backend int

const (
	hostBackend backend = iota
	stateBackend
)

func (b backend) String() string {
	if b == stateBackend {
		return "state"
	}
	return "host"
}

// stateInoBit keeps state inode numbers apart from host ones.
const stateInoBit = 1 << 63

// Routing is the per-generation routing decision (the generation's
// ignore-rules snapshot, the hidden top-level names and whether isolation
// is off). The daemon routes with it, and `lazaret state ignored` uses the
// same decision to find which state entries are ignored paths.
type Routing struct {
	rules *ignorerules.Rules
	// rulesPending, when not nil, opens once the walk for the workspace's
	// .gitignore files ended (Router.loadRules, without the coordinator's
	// snapshot); Ignored waits for it before the rules decide anything. It
	// stays shut if that walk failed: the daemon then exits without another
	// decision.
	rulesPending *rulesGate
	// hidden are top-level names always routed to state (with everything
	// below them): absent editor configuration, a .git the host lacked.
	hidden map[string]bool
	// passthrough applies no ignore rules (isolation disabled): only the
	// hidden names and nested Git directories are routed to state.
	passthrough bool
	// sticky are the Domain's sticky ignored paths (package
	// stickyignore): routed to state with everything below them whatever
	// the rules say, so a .gitignore the sandbox edited cannot expose
	// host content ignored in an earlier generation.
	sticky map[string]bool
}

// NewRouting builds the routing decision from the generation's rules and
// hidden names; passthrough applies no ignore rules.
func NewRouting(rules *ignorerules.Rules, hidden []string, passthrough bool) Routing {
	r := Routing{rules: rules, hidden: map[string]bool{}, passthrough: passthrough}
	for _, h := range hidden {
		r.hidden[h] = true
	}
	return r
}

// AddSticky routes paths (workspace-relative, as stickyignore records
// them) and everything below them to state, also when tracked or no
// longer ignored. Call it before serving.
func (r *Routing) AddSticky(paths ...string) {
	if r.sticky == nil {
		r.sticky = make(map[string]bool, len(paths))
	}
	for _, p := range paths {
		r.sticky[p] = true
	}
}

// stickyCovers reports whether rel or one of its ancestors is sticky.
func (r *Routing) stickyCovers(rel string) bool {
	if len(r.sticky) == 0 {
		return false
	}
	for p := rel; p != ""; p = parentOf(p) {
		if r.sticky[p] {
			return true
		}
	}
	return false
}

// Router routes workspace paths between the host and the state directory.
type Router struct {
	Routing
	roots [2]int // O_PATH directory descriptors: host workspace, state
	// mkdirMu serialises creation of state parent directories.
	mkdirMu sync.Mutex
	// watch invalidates the kernel's caches on host changes (nil: none,
	// short cache lifetimes).
	watch *hostWatch
	root  *node
	// guard is the generation's host Git configuration guard, replaced
	// whole when the coordinator recomputes it (SetGuard).
	guard atomic.Pointer[guard]
	// log is the daemon's (a discarding one until Mount sets it); refused
	// logs what the Git Sentry refuses here.
	log     *slog.Logger
	refused refusals
	// rulesDone delivers the outcome of adding the workspace's .gitignore
	// files, from the snapshot or the walk (loadRules, RulesLoaded).
	rulesDone chan error
	// ws is the workspace's host path (for seedLate; "" when unknown);
	// lateSeeded are the working trees whose gitfile the sandbox was
	// given this generation or had at its start.
	ws         string
	lateMu     sync.Mutex
	lateSeeded map[string]bool
	// specialBitsOnce logs the first set-user-ID or set-group-ID bit
	// hostMode drops.
	specialBitsOnce sync.Once
	// owner is what the developer's files are reported as (Ownership);
	// selfUID/selfGID are the daemon's, the developer's, ids.
	owner            Ownership
	selfUID, selfGID uint32
	// chowned holds the guest owners set by chown, by stable inode number
	// (see Ownership): until the daemon exits, the guest user who created
	// or was given a file sees it as its own.
	chownedMu sync.Mutex
	chowned   map[uint64]Ownership
}

// Ownership is the keep-id rule of the routed workspace (Podman's
// --userns=keep-id is the reference): every file the sandbox creates on
// either backend is created by the daemon and so belongs to the developer
// on the host, a guest chown succeeds without changing the host owner (the
// developer can always edit and delete what the agent made), and files of
// the developer (the daemon's own ids, namespace root of the Runtime
// Supervisor) are reported to the sandbox as the guest ids UID/GID, the
// profile's session user, so that user sees the workspace as its own.
// A chown is remembered for the generation (by inode, in memory): the
// guest user who created a file (gVisor's gofer chowns every new file to
// its creator) or was given one sees it as its own until the sandbox
// stops; after a restart it appears as the session user's again. Other
// host owners are reported as they are. The zero value reports the
// developer as guest root.
type Ownership struct {
	UID, GID uint32
}

// SetOwnership sets the guest ids the developer's files are reported as.
func (r *Router) SetOwnership(o Ownership) { r.owner = o }

// chownedOwner is the remembered guest owner of inode ino.
func (r *Router) chownedOwner(ino uint64) (Ownership, bool) {
	r.chownedMu.Lock()
	defer r.chownedMu.Unlock()
	o, ok := r.chowned[ino]
	return o, ok
}

// forgetOwner drops the remembered owner of a removed inode.
func (r *Router) forgetOwner(ino uint64) {
	r.chownedMu.Lock()
	delete(r.chowned, ino)
	r.chownedMu.Unlock()
}

// chown remembers a guest chown of inode ino (either id may be absent:
// it keeps its current guest value).
func (r *Router) chown(ino uint64, uid uint32, uok bool, gid uint32, gok bool) {
	r.chownedMu.Lock()
	defer r.chownedMu.Unlock()
	o, ok := r.chowned[ino]
	if !ok {
		o = r.owner
	}
	if uok {
		o.UID = uid
	}
	if gok {
		o.GID = gid
	}
	if o == r.owner {
		delete(r.chowned, ino)
		return
	}
	if r.chowned == nil {
		r.chowned = map[uint64]Ownership{}
	}
	r.chowned[ino] = o
}

// NewRouter adopts two O_PATH directory descriptors (host workspace and
// state directory), the generation's rules and its guard.
func NewRouter(hostFD, stateFD int, rules *ignorerules.Rules, hidden []string, g Guard) *Router {
	r := &Router{Routing: NewRouting(rules, hidden, false), roots: [2]int{hostFD, stateFD},
		selfUID: uint32(unix.Getuid()), selfGID: uint32(unix.Getgid()), log: slog.New(slog.DiscardHandler)}
	r.SetGuard(g)
	return r
}

// loadRules adds the workspace's .gitignore files to the router's rules:
// gitignores, the coordinator's snapshot, at once; without one it reads
// them in the background (ignorerules.LoadGitignores, a walk of the whole
// workspace): the mount, and the sandbox's boot behind it, do not wait for
// that walk, while every decision the rules take waits for its end
// (Routing.Ignored). RulesLoaded delivers its outcome; without isolation
// there is nothing to read. Call it once, before serving.
func (r *Router) loadRules(ws string, isolate bool, gitignores []ignorerules.Gitignore) {
	r.rulesDone = make(chan error, 1)
	if !isolate {
		r.rulesDone <- nil
		return
	}
	if gitignores != nil {
		// The coordinator's snapshot: the files its start scan read.
		r.rulesDone <- r.rules.AddGitignores(gitignores)
		return
	}
	gate := newRulesGate()
	r.rulesPending = gate
	rules := r.rules
	go func() {
		err := rules.LoadGitignores(ws)
		if err == nil {
			gate.open()
		}
		r.rulesDone <- err
	}()
}

// rulesGate holds decisions until the rules are complete. Every lookup
// passes it, so once open it costs an atomic load, not a lock.
type rulesGate struct {
	opened atomic.Bool
	ch     chan struct{}
}

func newRulesGate() *rulesGate { return &rulesGate{ch: make(chan struct{})} }

// open lets every decision through; what was written to the rules before
// it is seen after wait.
func (g *rulesGate) open() {
	g.opened.Store(true)
	close(g.ch)
}

// wait returns once the gate is open (at once for none).
func (g *rulesGate) wait() {
	if g == nil || g.opened.Load() {
		return
	}
	<-g.ch
}

// RulesLoaded delivers, once, the outcome of adding the workspace's
// .gitignore files that Mount began (the snapshot's at once, or the
// walk's): nil once the rules are complete. After an error no decision was
// taken from them, and none will be (the daemon ends).
func (r *Router) RulesLoaded() <-chan error { return r.rulesDone }

// Close releases the backend descriptors.
func (r *Router) Close() {
	r.watch.close()
	unix.Close(r.roots[0])
	unix.Close(r.roots[1])
}

// Ignored reports whether rel is routed to state.
func (r *Routing) Ignored(rel string, isDir bool) bool {
	if rel == "" {
		return false
	}
	top, _, _ := strings.Cut(rel, "/")
	if r.hidden[top] {
		return true
	}
	if top == ".git" {
		return false
	}
	if strings.HasSuffix(rel, "/.git") || strings.Contains(rel, "/.git/") {
		return true // nested repository or gitfile: never the host's
	}
	if r.passthrough {
		return false
	}
	if r.stickyCovers(rel) {
		return true
	}
	r.rulesPending.wait()
	return r.rules.Ignored(rel, isDir)
}

// gitDenied are names the sandbox may never create (or rename or link
// into place) anywhere below the top-level .git: host Git follows
// `commondir` to another repository, obeys `config`/`config.worktree`
// and runs `hooks` of submodule and worktree Git directories, and a
// submodule's `modules` holds its nested submodules' Git directories.
// Existing ones are covered by Git Sentry mounts (and gitAdmin); new ones
// are refused here (EPERM), as is a new entry directly below a `modules`
// (a new nested submodule Git directory), so `git worktree add` and `git
// submodule add/init` work on the host only.
var gitDenied = map[string]bool{"commondir": true, "config": true, "config.worktree": true, "hooks": true, "gitdir": true, "modules": true}

// denied reports whether creating rel is refused by the Git Sentry (and
// logs the refusal: refusals).
// Only Git-directory levels count (.git, .git/worktrees/W, .git/modules/…
// outside refs/logs/objects/info), so a branch named "config" still works.
// A top-level .git routed to state (the host had none) is the sandbox's
// own repository: `git init` works there, and nothing of it reaches the
// host.
func (r *Router) denied(rel string) bool {
	if r.hidden[".git"] || !deniedName(rel) {
		return false
	}
	r.refused.note(rel)
	return true
}

func deniedName(rel string) bool {
	parent := parentOf(rel)
	switch parent {
	case ".git/modules", ".git/worktrees":
		return true // a new submodule or worktree Git directory
	case ".git":
		if n := rel[len(".git/"):]; n == "modules" || n == "worktrees" {
			return true
		}
	}
	if strings.HasPrefix(parent, ".git/modules/") && strings.HasSuffix(parent, "/modules") && !inGitData(parent) {
		return true // a new nested submodule Git directory
	}
	if !strings.HasPrefix(rel, ".git/") || !gitDenied[rel[strings.LastIndexByte(rel, '/')+1:]] {
		return false
	}
	switch {
	case parent == ".git":
		return true
	case strings.HasPrefix(parent, ".git/worktrees/"):
		return !strings.Contains(strings.TrimPrefix(parent, ".git/worktrees/"), "/")
	case strings.HasPrefix(parent, ".git/modules/"):
		return !inGitData(parent)
	}
	return false
}

// inGitData reports whether dir, below .git/modules, lies in a Git
// directory's data (refs, logs, objects) or info.
func inGitData(dir string) bool {
	for _, c := range strings.Split(strings.TrimPrefix(dir, ".git/modules/"), "/") {
		switch c {
		case "refs", "logs", "objects", "info":
			return true
		}
	}
	return false
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// Root returns the root node of the filesystem.
func (r *Router) Root() fs.InodeEmbedder {
	if r.root == nil {
		r.root = &node{r: r}
	}
	return r.root
}

// node is one workspace path; its location is recomputed from its path.
type node struct {
	fs.Inode
	r *Router
	// io is the descriptor file I/O uses (fileio.go).
	io fileFD
	// sent are the attributes last sent to the kernel, or that it will
	// fetch (watch.go); busy counts the daemon's changes of the inode in
	// progress.
	sent atomic.Pointer[attrStamp]
	busy atomic.Int32
}

// changing marks a change of the node's inode by the daemon until the
// returned function is called (the host watch waits for its outcome).
func (n *node) changing() func() {
	n.busy.Add(1)
	return func() { n.busy.Add(-1) }
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
)

func (n *node) rel() string { return n.Path(n.Root()) }

// stat lstat()s rel in one backend.
func (r *Router) stat(b backend, rel string, st *unix.Stat_t) error {
	if rel == "" {
		return ignoreEINTR(func() error { return unix.Fstat(r.roots[b], st) })
	}
	dfd, err := openBeneath(r.roots[b], parentOf(rel), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	name := rel[strings.LastIndexByte(rel, '/')+1:]
	return ignoreEINTR(func() error { return unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW) })
}

// locate finds where an existing rel lives: in state if it exists there as
// an ignored path, else on the host if it exists there as a non-ignored
// one. The directory bit decides dir-only patterns.
func (r *Router) locate(rel string, st *unix.Stat_t) (backend, error) {
	if rel == "" {
		return hostBackend, r.stat(hostBackend, "", st)
	}
	// A path no rule can ignore (as a file or a directory) is never in
	// state: skip that lookup (most workspace paths).
	if r.Ignored(rel, false) || r.Ignored(rel, true) {
		if err := r.stat(stateBackend, rel, st); err == nil && r.Ignored(rel, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			return stateBackend, nil
		}
	}
	if err := r.stat(hostBackend, rel, st); err != nil {
		return hostBackend, err
	}
	if r.Ignored(rel, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		return hostBackend, unix.ENOENT // hidden host content
	}
	return hostBackend, nil
}

// parentFD opens the directory that will hold rel in backend b, creating
// missing state directories (a state path's ancestors mirror the
// workspace's, created on demand).
func (r *Router) parentFD(b backend, rel string) (int, string, error) {
	dir, name := parentOf(rel), rel[strings.LastIndexByte(rel, '/')+1:]
	fd, err := openBeneath(r.roots[b], dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil || b != stateBackend || errno(err) != unix.ENOENT {
		return fd, name, err
	}
	r.mkdirMu.Lock()
	defer r.mkdirMu.Unlock()
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		pfd, err := openBeneath(r.roots[b], cur, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, "", err
		}
		err = unix.Mkdirat(pfd, c, 0o755)
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return -1, "", err
		}
		cur = join(cur, c)
	}
	fd, err = openBeneath(r.roots[b], dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, name, err
}

func stable(b backend, st *unix.Stat_t) fs.StableAttr {
	ino := st.Ino
	if b == stateBackend {
		ino |= stateInoBit
	} else {
		ino &^= stateInoBit
	}
	return fs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: ino}
}

func (r *Router) fillAttr(b backend, st *unix.Stat_t, a *fuse.Attr) {
	var s syscall.Stat_t
	s.Dev, s.Ino, s.Nlink, s.Mode, s.Uid, s.Gid, s.Rdev = st.Dev, st.Ino, st.Nlink, st.Mode, st.Uid, st.Gid, st.Rdev
	if s.Uid == r.selfUID {
		s.Uid = r.owner.UID
	}
	if s.Gid == r.selfGID {
		s.Gid = r.owner.GID
	}
	if o, ok := r.chownedOwner(stable(b, st).Ino); ok && st.Uid == r.selfUID && st.Gid == r.selfGID {
		s.Uid, s.Gid = o.UID, o.GID
	}
	s.Size, s.Blksize, s.Blocks = st.Size, st.Blksize, st.Blocks
	s.Atim = syscall.Timespec{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec}
	s.Mtim = syscall.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}
	s.Ctim = syscall.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec}
	a.FromStat(&s)
	a.Ino = stable(b, st).Ino
}

func (n *node) child(ctx context.Context, b backend, rel string, st *unix.Stat_t, out *fuse.EntryOut) *fs.Inode {
	n.r.fillAttr(b, st, &out.Attr)
	in := n.NewInode(ctx, &node{r: n.r}, stable(b, st))
	if c, ok := in.Operations().(*node); ok {
		c.sent.Store(stampOf(b, st))
	}
	if b == hostBackend && st.Mode&unix.S_IFMT == unix.S_IFDIR && n.r.watch != nil && !n.r.watch.watched(st.Ino) {
		if dfd, err := openBeneath(n.r.roots[b], rel, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
			n.r.watch.add(in, dfd, st.Ino)
			unix.Close(dfd)
		}
	}
	if n.r.watch.short() {
		out.SetEntryTimeout(shortTimeout)
		out.SetAttrTimeout(shortTimeout)
	}
	return in
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	dir := n.rel()
	rel := join(dir, name)
	var st unix.Stat_t
	b, err := n.r.locate(rel, &st)
	if name == ".git" && dir != "" && errno(err) == unix.ENOENT && n.r.seedLate(dir) {
		b, err = n.r.locate(rel, &st) // a submodule the host set up since the start
	}
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, b, rel, &st, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	b, ok := n.keptStat(&st)
	if !ok {
		var err error
		if b, err = n.r.locate(n.rel(), &st); err != nil {
			return errno(err)
		}
	}
	n.r.fillAttr(b, &st, &out.Attr)
	n.sent.Store(stampOf(b, &st))
	if n.r.watch.short() {
		out.SetTimeout(shortTimeout)
	}
	return 0
}

// withPath opens the node itself (O_PATH, never following) in the backend
// it lives in and calls f with its stat and a /proc/self/fd path naming
// exactly that inode.
func (n *node) withPath(f func(b backend, fd int, procPath string, st *unix.Stat_t) error) syscall.Errno {
	var st unix.Stat_t
	b, fd, err := n.r.openLocated(n.rel(), &st)
	if errno(err) == unix.ENOENT {
		// A file no name holds any more, still open in the sandbox.
		if ok, err := n.withKept(func(b backend, fd int) error {
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			return f(b, fd, "/proc/self/fd/"+itoa(fd), &st)
		}); ok {
			return errno(err)
		}
	}
	if err != nil {
		return errno(err)
	}
	defer unix.Close(fd)
	return errno(f(b, fd, "/proc/self/fd/"+itoa(fd), &st))
}

// openLocated is locate by descriptor: it opens rel (O_PATH, never
// following) where it lives — in state if it exists there as an ignored
// path, else on the host if it exists there as a non-ignored one — and
// fstat()s the descriptor (one resolution instead of a parent lookup, a
// stat and a second open).
func (r *Router) openLocated(rel string, st *unix.Stat_t) (backend, int, error) {
	try := func(b backend) (int, error) {
		fd, err := openBeneath(r.roots[b], rel, unix.O_PATH, 0)
		if err != nil {
			return -1, err
		}
		if err := ignoreEINTR(func() error { return unix.Fstat(fd, st) }); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	if rel != "" && (r.Ignored(rel, false) || r.Ignored(rel, true)) {
		if fd, err := try(stateBackend); err == nil {
			if r.Ignored(rel, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
				return stateBackend, fd, nil
			}
			unix.Close(fd)
		}
	}
	fd, err := try(hostBackend)
	if err != nil {
		return hostBackend, -1, err
	}
	if r.Ignored(rel, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		unix.Close(fd)
		return hostBackend, -1, unix.ENOENT // hidden host content
	}
	return hostBackend, fd, nil
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	p := len(buf)
	for i > 0 {
		p--
		buf[p] = byte('0' + i%10)
		i /= 10
	}
	return string(buf[p:])
}

// childNode returns the node the kernel knows as name in n, if any.
func (n *node) childNode(name string) (*node, bool) {
	if c := n.GetChild(name); c != nil {
		cn, ok := c.Operations().(*node)
		return cn, ok
	}
	return nil, false
}

// selfChange tells the host watch that the daemon is about to change name
// in this directory, and selfDone what the name holds after the change
// (its stable inode number, 0 for nothing): the watch then knows the
// kernel is told exactly that, even before go-fuse's tree shows it.
func (n *node) selfChange(b backend, name string) {
	if b == hostBackend && n.r.watch != nil {
		n.r.watch.self(n.EmbeddedInode(), name, unknownIno)
	}
}

func (n *node) selfDone(b backend, name string, ino uint64) {
	if b == hostBackend && n.r.watch != nil {
		n.r.watch.self(n.EmbeddedInode(), name, ino)
	}
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	defer n.changing()()
	e := n.withPath(func(b backend, fd int, p string, stp *unix.Stat_t) error {
		st := *stp
		if n.guardedNode(b) {
			return unix.EROFS
		}
		isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
		if m, ok := in.GetMode(); ok {
			if isLink {
				return unix.EOPNOTSUPP
			}
			if err := unix.Chmod(p, n.r.hostMode(m, st.Mode&unix.S_IFMT == unix.S_IFDIR)); err != nil {
				return err
			}
		}
		// A chown (uid or gid) succeeds without changing the host owner,
		// the developer; the guest owner is remembered (Ownership).
		uid, uok := in.GetUID()
		gid, gok := in.GetGID()
		if uok || gok {
			n.r.chown(stable(b, &st).Ino, uid, uok, gid, gok)
		}
		if sz, ok := in.GetSize(); ok {
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return unix.EINVAL
			}
			if err := unix.Truncate(p, int64(sz)); err != nil {
				return err
			}
		}
		mtime, mok := in.GetMTime()
		atime, aok := in.GetATime()
		if mok || aok {
			ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
			if aok {
				ts[0] = unix.NsecToTimespec(atime.UnixNano())
			}
			if mok {
				ts[1] = unix.NsecToTimespec(mtime.UnixNano())
			}
			if isLink {
				return nil // times of a symlink itself: not needed by any tool we serve
			}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
				return err
			}
		}
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		n.r.fillAttr(b, &st, &out.Attr)
		n.sent.Store(stampOf(b, &st))
		n.r.attrTimeout(out)
		return nil
	})
	return e
}

// attrTimeout grants an attribute reply the mount's lifetime (go-fuse
// applies it to GETATTR replies only; without it every SETATTR, such as the
// chown and utimes of each file an untar creates, costs a GETATTR after).
func (r *Router) attrTimeout(out *fuse.AttrOut) {
	if r.watch.short() {
		out.SetTimeout(shortTimeout)
	} else {
		out.SetTimeout(cacheTimeout)
	}
}

// openFlags keeps the flags a FUSE create passes on to the host open (the
// access mode and O_APPEND do not matter: see fileio.go).
func openFlags(flags uint32) int {
	const keep = unix.O_TRUNC | unix.O_NOATIME | unix.O_LARGEFILE
	return int(flags) & keep
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	rel := join(n.rel(), name)
	if n.r.denied(rel) {
		return nil, nil, 0, unix.EPERM
	}
	b := hostBackend
	if n.r.Ignored(rel, false) {
		b = stateBackend
	}
	if n.r.guarded(b, rel) {
		return nil, nil, 0, unix.EROFS
	}
	dfd, base, err := n.r.parentFD(b, rel)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	defer unix.Close(dfd)
	n.selfChange(b, name)
	// The descriptor is closed at once (I/O goes through the node, see
	// fileio.go), so it is read-only unless it must truncate: closing it
	// then leaves no write event behind.
	acc := unix.O_RDONLY
	if flags&unix.O_TRUNC != 0 {
		acc = int(flags & unix.O_ACCMODE)
	}
	how := unix.OpenHow{Flags: uint64(acc | openFlags(flags) | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC | int(flags&unix.O_EXCL)), Mode: uint64(n.r.hostMode(mode, false)), Resolve: resolveFlags}
	fd, err := unix.Openat2(dfd, base, &how)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	n.selfDone(b, name, stable(b, &st).Ino)
	in := n.child(ctx, b, rel, &st, out)
	// No file handle: I/O goes through the node (fileio.go).
	return in, nil, 0, 0
}

// mkchild creates name with mk in the backend its routing chooses.
func (n *node) mkchild(ctx context.Context, name string, isDir bool, out *fuse.EntryOut, mk func(dfd int, base string) error) (*fs.Inode, syscall.Errno) {
	rel := join(n.rel(), name)
	if n.r.denied(rel) {
		return nil, unix.EPERM
	}
	b := hostBackend
	if n.r.Ignored(rel, isDir) {
		b = stateBackend
	}
	// A name visible from the other backend already exists.
	var st unix.Stat_t
	if _, err := n.r.locate(rel, &st); err == nil {
		return nil, unix.EEXIST
	}
	if n.r.guarded(b, rel) {
		return nil, unix.EROFS
	}
	dfd, base, err := n.r.parentFD(b, rel)
	if err != nil {
		return nil, errno(err)
	}
	defer unix.Close(dfd)
	n.selfChange(b, name)
	if err := mk(dfd, base); err != nil {
		return nil, errno(err)
	}
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, errno(err)
	}
	n.selfDone(b, name, stable(b, &st).Ino)
	return n.child(ctx, b, rel, &st, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.mkchild(ctx, name, true, out, func(dfd int, base string) error { return unix.Mkdirat(dfd, base, n.r.hostMode(mode, true)) })
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFREG:
	default:
		return nil, unix.EPERM // no device nodes in the workspace
	}
	return n.mkchild(ctx, name, false, out, func(dfd int, base string) error {
		return unix.Mknodat(dfd, base, mode&unix.S_IFMT|n.r.hostMode(mode, false), 0)
	})
}

// hostMode is the permission part of mode as the daemon sets it on a host
// file: without the set-user-ID bit, nor the set-group-ID bit of a
// non-directory. Every file the sandbox makes is the developer's on the
// host (Ownership), so such a bit would let anyone who can reach the file
// run a program the agent wrote as the developer; a directory keeps its
// set-group-ID bit (new entries inherit its group). The first dropped bit
// of a generation is logged.
func (r *Router) hostMode(mode uint32, isDir bool) uint32 {
	m := mode & 0o7777 &^ unix.S_ISUID
	if !isDir {
		m &^= unix.S_ISGID
	}
	if m != mode&0o7777 {
		r.specialBitsOnce.Do(func() {
			r.log.Info("set-user-ID and set-group-ID bits the sandbox sets on its files are not set on the host", "mode", fmt.Sprintf("%04o", mode&0o7777))
		})
	}
	return m
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.mkchild(ctx, name, false, out, func(dfd int, base string) error { return unix.Symlinkat(target, dfd, base) })
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, unix.EXDEV
	}
	var st unix.Stat_t
	trel := t.rel()
	tb, err := n.r.locate(trel, &st)
	if err != nil {
		return nil, errno(err)
	}
	if n.r.guarded(tb, trel) {
		return nil, unix.EROFS // a second name would be an unguarded way to write it
	}
	rel := join(n.rel(), name)
	b := hostBackend
	if n.r.Ignored(rel, false) {
		b = stateBackend
	}
	if b != tb {
		return nil, unix.EXDEV
	}
	tfd, tbase, err := n.r.parentFD(tb, trel)
	if err != nil {
		return nil, errno(err)
	}
	defer unix.Close(tfd)
	return n.mkchild(ctx, name, false, out, func(dfd int, base string) error { return unix.Linkat(tfd, tbase, dfd, base, 0) })
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	var st unix.Stat_t
	rel := n.rel()
	b, err := n.r.locate(rel, &st)
	if err != nil {
		return nil, errno(err)
	}
	dfd, base, err := n.r.parentFD(b, rel)
	if err != nil {
		return nil, errno(err)
	}
	defer unix.Close(dfd)
	buf := make([]byte, 4096)
	k, err := unix.Readlinkat(dfd, base, buf)
	if err != nil {
		return nil, errno(err)
	}
	return buf[:k], 0
}

// remove unlinks name (a file, or a directory with unix.AT_REMOVEDIR).
func (n *node) remove(name string, flags int) syscall.Errno {
	rel := join(n.rel(), name)
	var st unix.Stat_t
	b, err := n.r.locate(rel, &st)
	if err != nil {
		return errno(err)
	}
	if n.r.guarded(b, rel) {
		return unix.EROFS
	}
	dfd, base, err := n.r.parentFD(b, rel)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(dfd)
	if flags&unix.AT_REMOVEDIR != 0 && b == hostBackend {
		// The merged view of a host directory also holds its state mirror.
		if sfd, err := openBeneath(n.r.roots[stateBackend], rel, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			names, _ := readNames(sfd)
			unix.Close(sfd)
			if len(names) > 0 {
				return unix.ENOTEMPTY
			}
		}
	}
	if c, ok := n.childNode(name); ok && flags&unix.AT_REMOVEDIR == 0 {
		c.orphan(dfd, base)
	}
	n.selfChange(b, name)
	if err := unix.Unlinkat(dfd, base, flags); err != nil {
		return errno(err)
	}
	n.selfDone(b, name, 0)
	if flags&unix.AT_REMOVEDIR != 0 || st.Nlink <= 1 {
		n.r.forgetOwner(stable(b, &st).Ino) // the number may be reused
	}
	if flags&unix.AT_REMOVEDIR != 0 && b == hostBackend {
		if sfd, sbase, err := n.r.parentFD(stateBackend, rel); err == nil {
			unix.Unlinkat(sfd, sbase, unix.AT_REMOVEDIR)
			unix.Close(sfd)
		}
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno { return n.remove(name, 0) }
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, unix.AT_REMOVEDIR)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return unix.EXDEV
	}
	src, dst := join(n.rel(), name), join(np.rel(), newName)
	if n.r.denied(dst) || flags&unix.RENAME_EXCHANGE != 0 && n.r.denied(src) {
		return unix.EPERM
	}
	var st unix.Stat_t
	sb, err := n.r.locate(src, &st)
	if err != nil {
		return errno(err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	db := hostBackend
	if n.r.Ignored(dst, isDir) {
		db = stateBackend
	}
	if sb != db {
		return unix.EXDEV // the caller copies (mv does), so each side stays in its backend
	}
	if n.r.guarded(sb, src) || n.r.guarded(db, dst) {
		return unix.EROFS
	}
	if sb == hostBackend && (n.r.guardNow().holdsGuarded(src) || n.r.guardNow().holdsGuarded(dst) || (isDir || flags&unix.RENAME_EXCHANGE != 0) && (gitAdminHolds(src) || gitAdminHolds(dst))) {
		// Moving a directory that holds a guarded path or may be a Git
		// directory, or onto one, could replace what host Git reads or
		// bring in control paths never created: let the caller copy (its
		// copy of the guarded names is refused).
		return unix.EXDEV
	}
	if isDir && sb == hostBackend && n.r.hidesBelow(src) {
		// Moving a host directory that holds hidden ignored content could
		// re-route that content to a visible path: let the caller copy.
		return unix.EXDEV
	}
	sfd, sbase, err := n.r.parentFD(sb, src)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(sfd)
	dfd, dbase, err := n.r.parentFD(db, dst)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(dfd)
	if c, ok := np.childNode(newName); ok && flags&unix.RENAME_EXCHANGE == 0 {
		c.orphan(dfd, dbase) // the name it replaces
	}
	n.selfChange(sb, name)
	np.selfChange(db, newName)
	if err := unix.Renameat2(sfd, sbase, dfd, dbase, uint(flags)); err != nil {
		return errno(err)
	}
	if flags&unix.RENAME_EXCHANGE == 0 {
		n.selfDone(sb, name, 0)
		np.selfDone(db, newName, stable(sb, &st).Ino)
	}
	return 0
}

// hidesBelow reports whether the host subtree at rel holds any entry the
// router hides (bounded walk; an error counts as "yes").
func (r *Router) hidesBelow(rel string) bool {
	budget := 100000
	var walk func(dir string) bool
	walk = func(dir string) bool {
		fd, err := openBeneath(r.roots[hostBackend], dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return true
		}
		ents, err := readEntries(fd)
		unix.Close(fd)
		if err != nil {
			return true
		}
		for _, e := range ents {
			budget--
			if budget < 0 {
				return true
			}
			p := join(dir, e.name)
			isDir := e.typ == unix.DT_DIR
			if r.Ignored(p, isDir) {
				return true
			}
			if isDir && walk(p) {
				return true
			}
		}
		return false
	}
	return walk(rel)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s unix.Statfs_t
	if err := unix.Fstatfs(n.r.roots[hostBackend], &s); err != nil {
		return errno(err)
	}
	out.Blocks, out.Bfree, out.Bavail, out.Files, out.Ffree = s.Blocks, s.Bfree, s.Bavail, s.Files, s.Ffree
	out.Bsize, out.NameLen, out.Frsize = uint32(s.Bsize), uint32(s.Namelen), uint32(s.Frsize)
	return 0
}
