// Package statemaint runs the state operations of the CLI that need the
// developer's user namespace (spec §3.8, SR-14): the structural
// verification of State Anchors and Ignored Workspace State (`state
// verify`, `state ignored verify`), the Ignored Workspace State reset
// (`state ignored reset`), the deletion of the Storage Root's trash
// (`lazaret rm`) and of the prepared images `lazaret gc` reclaimed, and the
// export of a recipe build's State Anchors as an image layer (`lazaret
// image build`).
//
// State trees hold files of the developer's subordinate ids, often in
// private directories the host user can neither read nor move to another
// directory nor delete. The CLI (Verify, ResetIgnored, PurgeTrash,
// PurgePreparedTrash) therefore spawns the hidden role Arg of lazaret-rs
// through its broker in a new user namespace whose map it writes with
// newuidmap/newgidmap before releasing the launch barrier; the role (Main)
// acts as namespace root with packages statetree, anchor, ignoredstate,
// removal and prepare and prints a versioned JSON result on stdout.
//
// The map leaves namespace id 65534 unmapped:
//
//	0            -> the developer
//	1..65533     -> subordinate ids start .. start+65532
//	65535..65537 -> subordinate ids start+65533 .. start+65535
//
// so that the kernel's overflow id (65534, what every id outside the map
// shows as) is unambiguous: an entry owned by it belongs to someone other
// than the developer and its subordinate ids.
package statemaint

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/diskuse"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/ignoredstate"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/profilestate"
	"github.com/lazaret/lazaret/pkg/removal"
	"github.com/lazaret/lazaret/pkg/statetree"
	"github.com/lazaret/lazaret/pkg/treecopy"
)

// Arg selects the state-maintenance role of lazaret-rs.
const Arg = "__lazaret-state-maint"

// Operations of the role (--op).
const (
	OpVerify       = "verify"
	OpIgnoredReset = "ignored-reset"
	// OpPurge deletes the Storage Root's trash (removal.PurgeTrash): the
	// trees `lazaret rm` moved aside. It takes --storage-root instead of
	// --domain-root.
	OpPurge = "purge"
	// OpPurgePrepared deletes the reclaimed prepared images waiting in the
	// Storage Root's prepared/.trash (prepared.PurgeTrash): what `lazaret
	// gc` moved aside. It takes --storage-root instead of --domain-root.
	OpPurgePrepared = "purge-prepared"
	// OpPurgeAnchors deletes the State Anchors' trash of --domain-root
	// (anchor.PurgeTrash): what `lazaret state reset` discarded, which
	// the next Runtime Supervisor would otherwise delete.
	OpPurgeAnchors = "purge-anchors"
	// OpExportLayer writes the State Anchors' changes as one OCI layer tar
	// on stdout (anchor.ExportLayer, owners as guest ids) and its
	// ExportResult on descriptor 3: a recipe build's commit.
	OpExportLayer = "export-layer"
	// OpProfileSizes measures a profile's stored profile paths
	// (profilestate.Sizes). It takes --storage-root and --profile.
	OpProfileSizes = "profile-sizes"
	// OpDiskUsage measures every Domain's state and the profiles' paths
	// under --storage-root (diskuse.Storage), read-only; --trees
	// (comma-separated diskuse.TreeKey) measures those trees alone.
	OpDiskUsage = "disk-usage"
	// OpIgnoredCopy copies an ignored path out of the Ignored Workspace
	// State to a host path (--direction=out) or a host path into it
	// (--direction=in), with package treecopy.
	OpIgnoredCopy = "ignored-copy"
)

// ReportVersion is the version of Report; a newer one is refused.
const ReportVersion = 1

// Scopes of a verification.
const (
	ScopeAnchors = "anchors"
	ScopeIgnored = "ignored"
)

// Report is what the role prints.
type Report struct {
	Version int    `json:"version"`
	Scope   string `json:"scope"`
	// Anchors (scope anchors): one report per State Anchor.
	Anchors []anchor.Verification `json:"anchors,omitempty"`
	// Ignored (scope ignored).
	Ignored *ignoredstate.Verification `json:"ignored,omitempty"`
	// General findings concern no single anchor.
	General []statetree.Finding `json:"general"`
}

// Findings counts every finding of the report.
func (r *Report) Findings() int {
	n := len(r.General)
	for _, a := range r.Anchors {
		n += len(a.Findings)
	}
	if r.Ignored != nil {
		n += len(r.Ignored.Findings)
	}
	return n
}

// gap is the namespace id left unmapped (the kernel's overflow id).
const gap = 65534

// idMap is the newuidmap/newgidmap argument triples after the pid.
func idMap(host int, sub hostcheck.SubIDRange) []string {
	first := uint32(gap - 1)
	if sub.Count < first {
		first = sub.Count
	}
	m := []string{"0", strconv.Itoa(host), "1", "1", strconv.FormatUint(uint64(sub.Start), 10), strconv.FormatUint(uint64(first), 10)}
	if rest := sub.Count - first; rest > 0 {
		m = append(m, strconv.Itoa(gap+1), strconv.FormatUint(uint64(sub.Start+first), 10), strconv.FormatUint(uint64(rest), 10))
	}
	return m
}

// nsChecker returns the Checker of the role: ids as seen in the namespace
// Run creates (count subordinate ids each), described as host ids.
func nsChecker(hostUID, hostGID int, uidStart, gidStart, count uint32) *statetree.Checker {
	maxID := count
	if count >= gap {
		maxID = count + 1
	}
	ok := func(id uint32) bool { return id != gap && id <= maxID }
	// Reports name the guest id first (what `ls -n` shows in the
	// sandbox: the developer is guest root, subordinate id start+k is
	// guest k+1, see ocispec.IDMappings), then the host id.
	host := func(id uint32, start uint32, hostID int) string {
		switch {
		case id == 0:
			return "0 (host " + strconv.Itoa(hostID) + ", you)"
		case id == gap || id > maxID:
			return "of an id outside your user and subordinate ids"
		}
		h := start + id - 1
		if id > gap {
			h--
		}
		guest := h - start + 1
		if guest >= ocispec.GuestIDs {
			return "of host id " + strconv.FormatUint(uint64(h), 10) + " (no guest id)"
		}
		return strconv.FormatUint(uint64(guest), 10) + " (host " + strconv.FormatUint(uint64(h), 10) + ")"
	}
	return &statetree.Checker{
		OwnerOK: func(uid, gid uint32) bool { return ok(uid) && ok(gid) },
		HostUID: 0, HostGID: 0,
		Describe: func(id uint32, group bool) string {
			if group {
				return "gid " + host(id, gidStart, hostGID)
			}
			return "uid " + host(id, uidStart, hostUID)
		},
	}
}

// Main is the role: run --op on --domain-root (--storage-root for
// OpPurge) and print its JSON result.
//
// Preconditions: namespace root of a user namespace mapped as run maps it;
// the caller holds the Domain's lifecycle lock and has established that
// nothing uses the state (OpPurge: what is in the trash was moved there
// under those conditions and nothing uses it).
func Main(args []string) int {
	fl := flag.NewFlagSet("state-maint", flag.ContinueOnError)
	op := fl.String("op", OpVerify, "verify, ignored-reset or purge")
	root := fl.String("domain-root", "", "Domain Root")
	storageRoot := fl.String("storage-root", "", "purge, profile-sizes: the Storage Root")
	profile := fl.String("profile", "", "profile-sizes: the Agent Profile")
	scope := fl.String("scope", ScopeAnchors, "verify: anchors or ignored")
	rel := fl.String("path", "", "ignored-reset: the workspace-relative ignored path")
	all := fl.Bool("all", false, "ignored-reset: the whole Ignored Workspace State")
	hostPath := fl.String("host-path", "", "ignored-copy: the absolute host path (destination out, source in)")
	direction := fl.String("direction", "", "ignored-copy: out or in")
	force := fl.Bool("force", false, "ignored-copy: replace an existing destination")
	hostUID := fl.Int("host-uid", -1, "the developer's host uid (for reports)")
	hostGID := fl.Int("host-gid", -1, "the developer's host gid (for reports)")
	uidStart := fl.Uint("uid-start", 0, "first subordinate uid")
	gidStart := fl.Uint("gid-start", 0, "first subordinate gid")
	count := fl.Uint("count", 0, "subordinate ids mapped")
	trees := fl.String("trees", "", "disk-usage: only these trees (comma-separated KIND/NAME)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if err := checkArgs(*op, *root, *storageRoot, *count); err != nil {
		fmt.Fprintf(os.Stderr, "state-maint: %v\n", err)
		return 2
	}
	var out any
	var err error
	switch *op {
	case OpIgnoredCopy:
		res := CopyResult{Version: ReportVersion}
		res.Stats, err = ignoredCopy(*root, *rel, *hostPath, *direction, *force)
		out = res
	case OpDiskUsage:
		res := DiskUsageResult{Version: ReportVersion}
		var opts diskuse.Options
		if opts.Only, err = parseTrees(*trees); err == nil {
			res.Report, err = diskuse.Storage(*storageRoot, opts)
		}
		out = res
	case OpPurge:
		res := PurgeResult{Version: ReportVersion}
		res.Deleted, err = removal.PurgeTrash(context.Background(), *storageRoot, os.Getuid())
		out = res
	case OpPurgePrepared:
		res := PurgeResult{Version: ReportVersion}
		res.Deleted, err = prepared.PurgeTrash(context.Background(), *storageRoot)
		out = res
	case OpPurgeAnchors:
		res := PurgeResult{Version: ReportVersion}
		res.Deleted, err = anchor.PurgeTrash(*root, time.Now)
		out = res
	case OpProfileSizes:
		res := ProfileSizesResult{Version: ReportVersion}
		res.Paths, err = profilestate.Sizes(*storageRoot, *profile)
		out = res
	case OpVerify:
		out, err = verify(*root, *scope, nsChecker(*hostUID, *hostGID, uint32(*uidStart), uint32(*gidStart), uint32(*count)))
	case OpExportLayer:
		res := ExportResult{Version: ReportVersion}
		res.Stats, err = exportLayer(*root, os.Stdout)
		if err == nil {
			result := os.NewFile(3, "result")
			if result == nil {
				err = errdefs.New(errdefs.ErrInvalid, "--op=%s needs its result descriptor 3", *op)
			} else {
				err = json.NewEncoder(result).Encode(res)
				result.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "state-maint: %v\n", err)
			return 1
		}
		return 0
	case OpIgnoredReset:
		res := ResetResult{Version: ReportVersion, All: *all, Found: true}
		if *all {
			err = ignoredstate.ResetAll(*root, time.Now)
		} else {
			res.Found, err = ignoredstate.Reset(*root, *rel, time.Now)
		}
		out = res
	default:
		err = errdefs.New(errdefs.ErrInvalid, "unknown operation %q", *op)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "state-maint: %v\n", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 1
	}
	return 0
}

// checkArgs checks the role's arguments for op.
func checkArgs(op, domainRoot, storageRoot string, count uint) error {
	if op == OpPurge || op == OpPurgePrepared || op == OpProfileSizes || op == OpDiskUsage {
		if storageRoot == "" || !filepath.IsAbs(storageRoot) || domainRoot != "" {
			return errdefs.New(errdefs.ErrInvalid, "--op=%s takes --storage-root (absolute) and no --domain-root", op)
		}
		return nil
	}
	if domainRoot == "" || !filepath.IsAbs(domainRoot) || count == 0 || storageRoot != "" {
		return errdefs.New(errdefs.ErrInvalid, "--op=%s takes --domain-root (absolute) and --count, and no --storage-root", op)
	}
	return nil
}

// ExportResult is what the export-layer operation reports on descriptor 3.
type ExportResult struct {
	Version int               `json:"version"`
	Stats   anchor.LayerStats `json:"stats"`
}

// guestID translates an id of the role's namespace (mapped as the package
// doc says) into the sandbox's guest id: the sandbox maps guest g to RS id
// g, and RS id g is the developer (0) or subordinate id start+g-1
// (ocispec.IDMappings), which this namespace maps at g below the gap and
// g+1 above it. The gap itself and ids beyond the guest range are no guest
// id.
func guestID(id uint32) (uint32, bool) {
	switch {
	case id < gap:
		return id, true
	case id == gap:
		return 0, false
	}
	g := id - 1
	return g, g < ocispec.GuestIDs
}

// exportLayer writes the layer of domainRoot's State Anchors to w.
func exportLayer(domainRoot string, w io.Writer) (anchor.LayerStats, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	st, err := anchor.ExportLayer(domainRoot, tw, guestID)
	if err != nil {
		return st, err
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	return st, bw.Flush()
}

// ExportLayer writes the State Anchors of the stopped Domain at domainRoot
// as one uncompressed OCI layer tar to w, in the Domain's user namespace
// (where the subordinate-id files can be read), and returns what it held.
//
// Preconditions: the caller holds the Domain's lifecycle lock and has
// established that the Domain is inactive (no overlay over its anchors).
func ExportLayer(ctx context.Context, rsPath, domainRoot string, w io.Writer) (anchor.LayerStats, error) {
	resR, resW, err := os.Pipe()
	if err != nil {
		return anchor.LayerStats{}, err
	}
	defer resR.Close()
	var res ExportResult
	done := make(chan error, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(resR, 64<<10))
		if err == nil {
			err = decodeResult(b, &res, func() int { return res.Version })
		}
		done <- err
	}()
	_, err = runTo(ctx, rsPath, w, []*os.File{resW}, "--domain-root="+domainRoot, "--op="+OpExportLayer)
	resW.Close()
	rerr := <-done
	if err != nil {
		return anchor.LayerStats{}, err
	}
	if rerr != nil {
		return anchor.LayerStats{}, rerr
	}
	return res.Stats, nil
}

// PurgeResult is what the purge operation prints.
type PurgeResult struct {
	Version int `json:"version"`
	// Deleted counts the trash entries deleted.
	Deleted int `json:"deleted"`
}

// ResetResult is what the ignored-reset operation prints.
type ResetResult struct {
	Version int  `json:"version"`
	All     bool `json:"all"`
	// Found: there was state at the path.
	Found bool `json:"found"`
}

// verify runs one scope with checker c.
func verify(domainRoot, scope string, c *statetree.Checker) (*Report, error) {
	rep := &Report{Version: ReportVersion, Scope: scope, General: []statetree.Finding{}}
	switch scope {
	case ScopeAnchors:
		anchors, general, err := anchor.Verify(domainRoot, c)
		if err != nil {
			return nil, err
		}
		c.Finish()
		rest := anchor.AttachLinks(anchors, c.Findings)
		rep.Anchors, rep.General = anchors, append(append(rep.General, general...), rest...)
	case ScopeIgnored:
		v, err := ignoredstate.Verify(domainRoot, c)
		if err != nil {
			return nil, err
		}
		c.Finish()
		v.Findings = append(v.Findings, c.Findings...)
		rep.Ignored = &v
	default:
		return nil, errdefs.New(errdefs.ErrInvalid, "unknown verification scope %q", scope)
	}
	return rep, nil
}

// Verify verifies scope of domainRoot in the Domain's user namespace (see
// the package doc) and returns the report.
//
// Preconditions: the caller holds the Domain's lifecycle lock and has
// established that the Domain is inactive.
func Verify(ctx context.Context, rsPath, domainRoot, scope string) (*Report, error) {
	out, err := run(ctx, rsPath, "--domain-root="+domainRoot, "--op="+OpVerify, "--scope="+scope)
	if err != nil {
		return nil, err
	}
	return decode(out)
}

// ResetIgnored discards the Ignored Workspace State of the
// workspace-relative path rel (or all of it) in the Domain's user
// namespace, where directories of subordinate ids can be moved to the
// trash (ignoredstate.Reset, ignoredstate.ResetAll). It reports whether
// there was state at rel.
//
// Preconditions: as Verify, and nothing uses the state.
func ResetIgnored(ctx context.Context, rsPath, domainRoot, rel string, all bool) (bool, error) {
	args := []string{"--domain-root=" + domainRoot, "--op=" + OpIgnoredReset, "--path=" + rel}
	if all {
		args = append(args, "--all")
	}
	out, err := run(ctx, rsPath, args...)
	if err != nil {
		return false, err
	}
	var r ResetResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil {
		return false, err
	}
	return r.Found, nil
}

// PurgeTrash deletes the trash of the Storage Root storageRoot (what
// `lazaret rm` moved aside there: Domain Roots, prepared images, the
// catalog) in the developer's user namespace, where files of subordinate
// ids can be deleted (removal.PurgeTrash), and returns how many trash
// entries it deleted.
//
// Preconditions: what is in the trash was moved there by removal, so
// nothing uses it.
func PurgeTrash(ctx context.Context, rsPath, storageRoot string) (int, error) {
	return purge(ctx, rsPath, "--storage-root="+storageRoot, "--op="+OpPurge)
}

// purge runs a purging operation and returns how many trash entries it
// deleted.
func purge(ctx context.Context, rsPath string, args ...string) (int, error) {
	out, err := run(ctx, rsPath, args...)
	if err != nil {
		return 0, err
	}
	var r PurgeResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil {
		return 0, err
	}
	return r.Deleted, nil
}

// PurgeAnchorTrash deletes what `lazaret state reset` discarded from the
// State Anchors of the Domain Root domainRoot (anchor.PurgeTrash, which
// first finishes an interrupted reset) in the developer's user namespace,
// where their subordinate-id files can be deleted, and returns how many
// trash entries it deleted.
//
// Preconditions: the caller holds the Domain lock.
func PurgeAnchorTrash(ctx context.Context, rsPath, domainRoot string) (int, error) {
	return purge(ctx, rsPath, "--domain-root="+domainRoot, "--op="+OpPurgeAnchors)
}

// PurgePreparedTrash deletes the prepared images `lazaret gc` reclaimed
// (moved into the Storage Root storageRoot's prepared/.trash) in the
// developer's user namespace, where their subordinate-id files can be
// deleted (prepared.PurgeTrash), and returns how many it deleted.
//
// Preconditions: none; what is in that trash was moved there by gc or a
// settled prepare intent, so nothing holds it, and a Runtime Supervisor
// deleting the same trash meanwhile is harmless.
func PurgePreparedTrash(ctx context.Context, rsPath, storageRoot string) (int, error) {
	return purge(ctx, rsPath, "--storage-root="+storageRoot, "--op="+OpPurgePrepared)
}

// ProfileSizesResult is what the profile-sizes operation prints.
type ProfileSizesResult struct {
	Version int                  `json:"version"`
	Paths   []profilestate.Usage `json:"paths"`
}

// ProfileSizes measures the stored profile paths of profile in the
// developer's user namespace, where the session user's files can be read
// (profilestate.Sizes).
func ProfileSizes(ctx context.Context, rsPath, storageRoot, profile string) ([]profilestate.Usage, error) {
	out, err := run(ctx, rsPath, "--storage-root="+storageRoot, "--op="+OpProfileSizes, "--profile="+profile)
	if err != nil {
		return nil, err
	}
	var r ProfileSizesResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil {
		return nil, err
	}
	return r.Paths, nil
}

// CopyResult is what the ignored-copy operation prints.
type CopyResult struct {
	Version int `json:"version"`
	treecopy.Stats
}

// ignoredCopy copies between <domainRoot>/ignored-state/<rel> (opened
// beneath the Domain Root without following any symlink) and hostPath (the
// developer's own choice, resolved as given).
func ignoredCopy(domainRoot, rel, hostPath, direction string, force bool) (treecopy.Stats, error) {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") || !filepath.IsAbs(hostPath) {
		return treecopy.Stats{}, errdefs.New(errdefs.ErrInvalid, "ignored-copy takes a workspace-relative --path and an absolute --host-path (got %q, %q)", rel, hostPath)
	}
	rootFD, err := unix.Open(domainRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return treecopy.Stats{}, fmt.Errorf("open the Domain Root: %w", err)
	}
	defer unix.Close(rootFD)
	stateFD, err := statetree.MkdirBeneath(rootFD, ignoredstate.Dir, 0o700)
	if err != nil {
		return treecopy.Stats{}, err
	}
	defer unix.Close(stateFD)
	hostDir, err := unix.Open(filepath.Dir(hostPath), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return treecopy.Stats{}, fmt.Errorf("open %s: %w", filepath.Dir(hostPath), err)
	}
	defer unix.Close(hostDir)
	parent, name := path.Split(rel)
	switch direction {
	case "out":
		sd := stateFD
		if parent != "" {
			if sd, err = statetree.OpenDir(stateFD, strings.TrimSuffix(parent, "/")); err != nil {
				return treecopy.Stats{}, err
			}
			defer unix.Close(sd)
		}
		return treecopy.Copy(sd, name, hostDir, filepath.Base(hostPath), force)
	case "in":
		// The mirror directories above the path, as the routing daemon
		// creates them on demand.
		dd, err := statetree.MkdirAllBeneath(stateFD, parent, 0o755)
		if err != nil {
			return treecopy.Stats{}, err
		}
		defer unix.Close(dd)
		return treecopy.Copy(hostDir, filepath.Base(hostPath), dd, name, force)
	}
	return treecopy.Stats{}, errdefs.New(errdefs.ErrInvalid, "--direction %q: out or in", direction)
}

// IgnoredCopy runs ignoredCopy in the developer's user namespace, where
// files of subordinate ids with private modes are readable and the copies
// belong to the developer (spec §3.8: confined to the Domain Root).
//
// Preconditions: direction in: the caller holds the Domain's lifecycle
// lock and has established that the Domain is inactive.
func IgnoredCopy(ctx context.Context, rsPath, domainRoot, rel, hostPath, direction string, force bool) (treecopy.Stats, error) {
	args := []string{"--domain-root=" + domainRoot, "--op=" + OpIgnoredCopy, "--path=" + rel, "--host-path=" + hostPath, "--direction=" + direction}
	if force {
		args = append(args, "--force")
	}
	out, err := run(ctx, rsPath, args...)
	if err != nil {
		return treecopy.Stats{}, err
	}
	var r CopyResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil {
		return treecopy.Stats{}, err
	}
	return r.Stats, nil
}

// DiskUsageResult is what the disk-usage operation prints.
type DiskUsageResult struct {
	Version int `json:"version"`
	diskuse.Report
}

// DiskUsage measures the Storage Root's trees (all of them when trees is
// nil) in the developer's user namespace, where directories of
// subordinate ids the developer cannot traverse are readable (read-only:
// no lock needed).
func DiskUsage(ctx context.Context, rsPath, storageRoot string, trees []diskuse.TreeKey) (diskuse.Report, error) {
	out, err := run(ctx, rsPath, diskUsageArgs(storageRoot, trees)...)
	if err != nil {
		return diskuse.Report{}, err
	}
	var r DiskUsageResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil {
		return diskuse.Report{}, err
	}
	return r.Report, nil
}

// diskUsageArgs is the disk-usage operation's command line for trees (nil:
// every tree; so too when there are more than maxTreesArg).
func diskUsageArgs(storageRoot string, trees []diskuse.TreeKey) []string {
	args := []string{"--storage-root=" + storageRoot, "--op=" + OpDiskUsage}
	if len(trees) > maxTreesArg {
		trees = nil // measure them all: one argument holds at most 128 KiB
	}
	if trees != nil {
		keys := make([]string, len(trees))
		for i, k := range trees {
			keys[i] = k.String()
		}
		args = append(args, "--trees="+strings.Join(keys, ","))
	}
	return args
}

// maxTreesArg bounds the trees DiskUsage names in --trees (each up to
// ~45 bytes; the kernel takes 128 KiB per argument).
const maxTreesArg = 1000

// parseTrees parses --trees: nil (every tree) when empty.
func parseTrees(s string) ([]diskuse.TreeKey, error) {
	if s == "" {
		return nil, nil
	}
	var keys []diskuse.TreeKey
	for _, f := range strings.Split(s, ",") {
		k, err := diskuse.ParseTreeKey(f)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("--trees: %w", err), errdefs.ErrInvalid)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// decodeResult decodes a role's result into v (whose version is read by
// version after decoding): none is ErrCorrupt, a newer one ErrRefused.
func decodeResult(out []byte, v any, version func() int) error {
	if err := json.Unmarshal(out, v); err != nil || version() == 0 {
		return errdefs.New(errdefs.ErrCorrupt, "the state maintenance role printed no result")
	}
	if n := version(); n > ReportVersion {
		return errdefs.New(errdefs.ErrRefused, "the state maintenance role's result has version %d, this lazaret reads up to %d: install matching lazaret and lazaret-rs", n, ReportVersion)
	}
	return nil
}

// run runs the role with args (after its common flags) in a new user
// namespace mapped as the package doc says and returns its stdout.
func run(ctx context.Context, rsPath string, extra ...string) ([]byte, error) {
	var out bytes.Buffer
	if _, err := runTo(ctx, rsPath, &limitedWriter{w: &out, n: 256 << 20}, nil, extra...); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// limitedWriter fails writes beyond n bytes.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errdefs.New(errdefs.ErrCorrupt, "the state maintenance role printed too much")
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// runTo is run with the role's stdout copied to stdout and files passed as
// descriptors 3 and up (runTo closes them once the role holds them, or on
// failure); it returns the bytes copied.
func runTo(ctx context.Context, rsPath string, stdout io.Writer, files []*os.File, extra ...string) (int64, error) {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	uids, gids, err := host.SubIDs()
	if err != nil {
		return 0, err
	}
	newuidmap, newgidmap, err := host.IDMapTools()
	if err != nil {
		return 0, err
	}
	count := uids.Count
	if gids.Count < count {
		count = gids.Count
	}
	uids.Count, gids.Count = count, count
	b, err := proc.NewBroker(slog.New(slog.DiscardHandler), rsPath)
	if err != nil {
		return 0, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return 0, err
	}
	defer errR.Close()
	uid, gid := os.Getuid(), os.Getgid()
	args := []string{filepath.Base(rsPath), Arg,
		"--host-uid=" + strconv.Itoa(uid), "--host-gid=" + strconv.Itoa(gid),
		"--uid-start=" + strconv.FormatUint(uint64(uids.Start), 10), "--gid-start=" + strconv.FormatUint(uint64(gids.Start), 10),
		"--count=" + strconv.FormatUint(uint64(count), 10)}
	args = append(args, extra...)
	child, err := b.Acquire(ctx, proc.AcquireSpec{
		Slot:   "state_maint",
		Target: proc.Command{Path: rsPath, Args: args, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Files: append([]*os.File{nil, outW, errW}, files...), Cloneflags: unix.CLONE_NEWUSER},
		Setup: func(ctx context.Context, h *pidfs.Handle) error {
			pid := strconv.Itoa(h.PID())
			for _, m := range []struct {
				tool string
				id   int
				r    hostcheck.SubIDRange
			}{{newuidmap, uid, uids}, {newgidmap, gid, gids}} {
				argv := append([]string{filepath.Base(m.tool), pid}, idMap(m.id, m.r)...)
				_, stderr, st, err := b.Output(ctx, argv[0], proc.Command{Path: m.tool, Args: argv, Env: []string{"PATH=/usr/bin:/bin"}}, 4096)
				if err != nil {
					return err
				}
				if st.ShellCode() != 0 {
					return errdefs.New(errdefs.ErrUnsupportedHost, "%s failed (%s): %s; check /etc/subuid and /etc/subgid for your user (`lazaret doctor`)", argv[0], st, strings.TrimSpace(string(stderr)))
				}
			}
			return nil
		},
	})
	outW.Close()
	errW.Close()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return 0, fmt.Errorf("start lazaret-rs state maintenance in your user namespace: %w", err)
	}
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() {
		io.Copy(&stderr, io.LimitReader(errR, 64<<10))
		close(done)
	}()
	n, rerr := io.Copy(stdout, outR)
	if rerr != nil {
		outR.Close() // the role fails on its next write and exits
	}
	<-done
	st, werr := child.Wait(ctx)
	if werr != nil {
		return n, werr
	}
	if st.ShellCode() != 0 {
		return n, errdefs.New(errdefs.ErrUnavailable, "lazaret-rs state maintenance failed (%s): %s", st, strings.TrimSpace(stderr.String()))
	}
	if rerr != nil {
		return n, rerr
	}
	return n, nil
}

func decode(out []byte) (*Report, error) {
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == nil {
		return nil, errdefs.New(errdefs.ErrCorrupt, "the state verifier printed no report")
	}
	if *v.Version > ReportVersion {
		return nil, errdefs.New(errdefs.ErrRefused, "the state verifier's report has version %d, this lazaret reads up to %d: install matching lazaret and lazaret-rs", *v.Version, ReportVersion)
	}
	var r Report
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("state verifier report: %w", err), errdefs.ErrCorrupt)
	}
	return &r, nil
}
