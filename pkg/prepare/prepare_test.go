package prepare

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/imagebuild"
	"github.com/lazaret/lazaret/pkg/ocilayout"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
	"github.com/lazaret/lazaret/pkg/proc"
	"go.podman.io/storage/pkg/reexec"
	"golang.org/x/sys/unix"
)

// TestMain dispatches the re-executed layer-applying child of
// chrootarchive, exactly as the production binary's main must.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	if crashHook != nil {
		os.Exit(crashHook())
	}
	code := m.Run()
	if busyboxDir != "" {
		os.RemoveAll(busyboxDir)
	}
	os.Exit(code)
}

var (
	busyboxOnce sync.Once
	busyboxDir  string
	busyboxErr  error
)

// busyboxRef builds the busybox image once per test binary and returns its
// oci: reference.
func busyboxRef(t *testing.T) string {
	t.Helper()
	busyboxOnce.Do(func() {
		busyboxDir, busyboxErr = os.MkdirTemp("", "lazaret-prepare-test-")
		if busyboxErr != nil {
			return
		}
		broker, err := proc.NewSelfBroker(nil)
		if err != nil {
			busyboxErr = err
			return
		}
		_, busyboxErr = imagebuild.Build(context.Background(), imagebuild.Options{
			Kind: imagebuild.KindBusybox, Dest: filepath.Join(busyboxDir, "busybox"), Broker: broker,
		})
	})
	if busyboxErr != nil {
		t.Fatal(busyboxErr)
	}
	return "oci:" + filepath.Join(busyboxDir, "busybox") + ":latest"
}

func requireRoot(t *testing.T) {
	t.Helper()
	if err := checkIdentityMap(); err != nil {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" {
			t.Skipf("LAZARET_ALLOW_SKIP=1: needs (namespace-)root with a full id map: %v", err)
		}
		t.Fatalf("needs (namespace-)root with a full id map: %v (run the unit tests as root, as make test does)", err)
	}
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// checkEntry asserts type, permission bits (with set-id/sticky) and owner.
func checkEntry(t *testing.T, p string, typ uint32, perm uint32, uid, gid uint32) {
	t.Helper()
	st := lstat(t, p)
	if st.Mode&unix.S_IFMT != typ || st.Mode&0o7777 != perm || st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: mode %o owner %d:%d; want type %o perm %o owner %d:%d",
			p, st.Mode, st.Uid, st.Gid, typ, perm, uid, gid)
	}
}

func readRecordFile(t *testing.T, a prepared.Artifact) prepared.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.Dir, recordName))
	if err != nil {
		t.Fatal(err)
	}
	var rec prepared.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func stagingEntries(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, preparedDir, stagingDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestEnsureBusybox(t *testing.T) {
	requireRoot(t)
	ref := busyboxRef(t)
	root := t.TempDir()
	var progress bytes.Buffer
	start := time.Now()
	a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("busybox prepare took %s\n%s", time.Since(start), progress.String())
	if !prepared.ValidID(a.ID) || a.Dir != filepath.Join(root, "prepared", a.ID) || a.Rootfs != filepath.Join(a.Dir, "rootfs") {
		t.Fatalf("artifact %+v", a)
	}
	if a.ID != prepared.ArtifactID(a.Source.ManifestDigest) || !strings.HasPrefix(a.Source.ConfigDigest, "sha256:") ||
		!strings.HasPrefix(a.Source.Ref, "oci:") || a.Created.IsZero() {
		t.Fatalf("source %+v", a)
	}
	r := a.Rootfs
	checkEntry(t, r, unix.S_IFDIR, 0o755, 0, 0)
	checkEntry(t, r+"/bin/busybox", unix.S_IFREG, 0o755, 0, 0)
	checkEntry(t, r+"/tmp", unix.S_IFDIR, 0o1777, 0, 0)
	checkEntry(t, r+"/root", unix.S_IFDIR, 0o700, 0, 0)
	checkEntry(t, r+"/proc", unix.S_IFDIR, 0o555, 0, 0) // image metadata kept
	if l, err := os.Readlink(r + "/bin/sh"); err != nil || l != "busybox" {
		t.Errorf("bin/sh -> %q, %v", l, err)
	}
	if l, err := os.Readlink(r + "/usr/bin/env"); err != nil || l != "/bin/busybox" {
		t.Errorf("usr/bin/env -> %q, %v", l, err)
	}
	// Mount points the image lacks are created 0755 root:root, files empty.
	for _, p := range []string{"/workspace", prepared.ControlDir, "/dev/pts", "/dev/shm"} {
		checkEntry(t, r+p, unix.S_IFDIR, 0o755, 0, 0)
	}
	for _, p := range []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"} {
		checkEntry(t, r+p, unix.S_IFREG, 0o644, 0, 0)
		if fi, _ := os.Stat(r + p); fi.Size() != 0 {
			t.Errorf("%s not empty", p)
		}
	}
	rec := readRecordFile(t, a)
	if rec.FormatVersion != prepared.FormatVersion || rec.ID != a.ID || rec.Source != a.Source || len(rec.Layers) != 1 ||
		!strings.Contains(rec.Preparer, "lazaret-prepare/") || rec.RootfsBytes < 1<<20 {
		t.Errorf("record %+v", rec)
	}
	wantCreated := []string{"/dev/pts", "/dev/shm", "/workspace", prepared.ControlDir, "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/var/lib", "/opt", "/home"}
	if strings.Join(rec.CreatedMountPoints, ",") != strings.Join(wantCreated, ",") {
		t.Errorf("created mount points %v, want %v", rec.CreatedMountPoints, wantCreated)
	}
	if n := stagingEntries(t, root); len(n) != 0 {
		t.Errorf("staging left: %v", n)
	}

	// Reuse: same artifact, not re-prepared.
	progress.Reset()
	b, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if b != a || !strings.Contains(progress.String(), "reusing") {
		t.Fatalf("second Ensure %+v (%q), want reuse of %+v", b, progress.String(), a)
	}
	l, found, err := Lookup(root, ref)
	if err != nil || !found || l != a {
		t.Fatalf("Lookup = %+v %v %v", l, found, err)
	}
	l, found, err = prepared.LookupID(root, a.ID)
	if err != nil || !found || l != a {
		t.Fatalf("prepared.LookupID = %+v %v %v", l, found, err)
	}
	if _, found, err := Lookup(t.TempDir(), ref); found || err != nil {
		t.Fatalf("Lookup in empty root: %v %v", found, err)
	}
	// The Runtime Supervisor's lookup, without the image library, finds
	// the same artifact, and the coordinator's reuse verdict, from the
	// Storage Catalog, names it Published (neither in an empty Storage
	// Root).
	d, err := ocilayout.ManifestDigest(ref)
	if err != nil || d != a.Source.ManifestDigest {
		t.Fatalf("ocilayout.ManifestDigest(%s) = %q, %v; want %s", ref, d, err, a.Source.ManifestDigest)
	}
	l, found, err = prepared.LookupDigest(root, prepared.ArtifactID(d), d)
	if err != nil || !found || l != a {
		t.Fatalf("prepared.LookupDigest = %+v %v %v", l, found, err)
	}
	for _, r := range []struct {
		root string
		want bool
	}{{root, true}, {t.TempDir(), false}} {
		cat, err := catalog.New(r.root, catalog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if published, err := preparedcatalog.Published(context.Background(), cat, a.ID); published != r.want || err != nil {
			t.Fatalf("preparedcatalog.Published in %s = %v, %v; want %v", r.root, published, err, r.want)
		}
	}
	if _, found, err := prepared.LookupDigest(t.TempDir(), a.ID, d); found || err != nil {
		t.Fatalf("prepared.LookupDigest in empty root: %v %v", found, err)
	}
}

// tarEntry describes one entry of a synthetic layer.
type tarEntry struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	body     string
	link     string
	major    int64
	minor    int64
	xattrs   map[string]string
}

func layerTar(t *testing.T, entries ...tarEntry) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			Linkname: e.link, Devmajor: e.major, Devminor: e.minor,
			ModTime: time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC), Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func TestEnsureExactMetadata(t *testing.T) {
	requireRoot(t)
	outside := t.TempDir() // must stay empty: layers try to write here
	dir := func(name string, mode int64, uid, gid int) tarEntry {
		return tarEntry{name: name, typ: tar.TypeDir, mode: mode, uid: uid, gid: gid}
	}
	file := func(name string, mode int64, uid, gid int, body string) tarEntry {
		return tarEntry{name: name, typ: tar.TypeReg, mode: mode, uid: uid, gid: gid, body: body}
	}
	l1 := layerTar(t,
		dir("./", 0o755, 0, 0),
		dir("usr/", 0o755, 0, 0), dir("usr/bin/", 0o755, 0, 0),
		file("usr/bin/su", 0o4755, 0, 0, "su"),
		file("usr/bin/wall", 0o2755, 0, 5, "wall"),
		file("usr/bin/chage", 0o2755, 0, 42, "chage"),
		tarEntry{name: "usr/bin/su-link", typ: tar.TypeLink, link: "usr/bin/su", mode: 0o4755},
		dir("var/", 0o755, 0, 0), dir("var/mail/", 0o2775, 0, 8),
		dir("home/", 0o755, 0, 0), dir("home/user/", 0o750, 1000, 1000),
		file("home/user/old", 0o640, 1000, 1000, "old"),
		file("home/user/.profile", 0o600, 1000, 1000, "x"),
		dir("srv/", 0o1777, 0, 0),
		file("srv/nobody", 0o444, 65534, 65534, "n"),
		dir("gone/", 0o755, 0, 0), file("gone/file", 0o644, 0, 0, "bye"),
		dir("etc/", 0o755, 0, 0),
		tarEntry{name: "etc/resolv.conf", typ: tar.TypeSymlink, link: "../run/systemd/resolve/stub-resolv.conf", mode: 0o777},
		file("etc/xattr", 0o644, 0, 0, "x"),
		dir("dev/", 0o755, 0, 0),
		tarEntry{name: "dev/null", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 3},
		tarEntry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660, major: 8, minor: 0, gid: 6},
		tarEntry{name: "fifo", typ: tar.TypeFifo, mode: 0o600},
		// Breakout attempts: an absolute symlink, then writes through it.
		tarEntry{name: "esc", typ: tar.TypeSymlink, link: outside, mode: 0o777},
		tarEntry{name: "up", typ: tar.TypeSymlink, link: "../../../../../../../../" + outside, mode: 0o777},
	)
	l2 := layerTar(t,
		file("gone/.wh.file", 0o644, 0, 0, ""),                          // OCI whiteout
		tarEntry{name: "usr/bin/chage", typ: tar.TypeChar, mode: 0o000}, // overlay whiteout 0/0
		file("home/user/.wh..wh..opq", 0o644, 0, 0, ""),                 // opaque dir
		file("home/user/new", 0o600, 1000, 1000, "new"),
		file("esc/pwned", 0o644, 0, 0, "pwned"),
		file("up/pwned2", 0o644, 0, 0, "pwned"),
		tarEntry{name: "dev/tty", typ: tar.TypeChar, mode: 0o666, major: 5, minor: 0},
	)
	layout := filepath.Join(t.TempDir(), "img")
	res, err := imagebuild.WriteLayout(context.Background(), layout, "t", imagebuild.ImageConfig{Cmd: []string{"/bin/sh"}}, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: "oci:" + layout + ":t", DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a.Source.ManifestDigest != res.ManifestDigest {
		t.Fatalf("manifest digest %s, layout has %s", a.Source.ManifestDigest, res.ManifestDigest)
	}
	r := a.Rootfs
	checkEntry(t, r+"/usr/bin/su", unix.S_IFREG, 0o4755, 0, 0)
	checkEntry(t, r+"/usr/bin/wall", unix.S_IFREG, 0o2755, 0, 5)
	checkEntry(t, r+"/var/mail", unix.S_IFDIR, 0o2775, 0, 8)
	checkEntry(t, r+"/home/user", unix.S_IFDIR, 0o750, 1000, 1000)
	checkEntry(t, r+"/home/user/new", unix.S_IFREG, 0o600, 1000, 1000)
	checkEntry(t, r+"/srv", unix.S_IFDIR, 0o1777, 0, 0)
	checkEntry(t, r+"/srv/nobody", unix.S_IFREG, 0o444, 65534, 65534)
	checkEntry(t, r+"/fifo", unix.S_IFIFO, 0o600, 0, 0)
	if a, b := lstat(t, r+"/usr/bin/su"), lstat(t, r+"/usr/bin/su-link"); a.Ino != b.Ino {
		t.Error("hard link not preserved")
	}
	if fi, err := os.Lstat(r + "/etc/xattr"); err != nil || !fi.ModTime().Equal(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("mtime not preserved: %v %v", fi, err)
	}
	for _, gone := range []string{"/gone/file", "/usr/bin/chage", "/home/user/old", "/home/user/.profile", "/dev/null", "/dev/sda", "/dev/tty"} {
		if _, err := os.Lstat(r + gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (err %v)", gone, err)
		}
	}
	// The symlinked resolv.conf became a plain empty file mount point.
	checkEntry(t, r+"/etc/resolv.conf", unix.S_IFREG, 0o644, 0, 0)
	// Breakout: nothing outside, the writes landed inside the rootfs.
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("layer wrote outside the rootfs: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(r, outside, "pwned")); err != nil {
		t.Errorf("esc/pwned not confined to the rootfs: %v", err)
	}
	rec := readRecordFile(t, a)
	if rec.SkippedDeviceNodes != 3 || rec.ConvertedWhiteoutDevices != 1 || len(rec.Layers) != 2 {
		t.Errorf("record counts: skipped %d %v, whiteouts %d, layers %d", rec.SkippedDeviceNodes, rec.SkippedDevicePaths, rec.ConvertedWhiteoutDevices, len(rec.Layers))
	}
	if strings.Join(rec.SkippedDevicePaths, ",") != "/dev/null,/dev/sda,/dev/tty" {
		t.Errorf("skipped paths %v", rec.SkippedDevicePaths)
	}
	if strings.Join(rec.ReplacedMountPoints, ",") != "/etc/resolv.conf" {
		t.Errorf("replaced %v", rec.ReplacedMountPoints)
	}
}

func TestNewerRecordRefused(t *testing.T) {
	requireRoot(t)
	ref := busyboxRef(t)
	root := t.TempDir()
	a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(a.Dir, recordName)
	b, _ := os.ReadFile(path)
	newer := strings.Replace(string(b), fmt.Sprintf(`"format_version": %d`, prepared.FormatVersion), `"format_version": 99`, 1)
	if newer == string(b) {
		t.Fatal("could not rewrite format_version")
	}
	if err := os.WriteFile(path, []byte(newer), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if !errors.Is(err, prepared.ErrNewerFormat) || !strings.Contains(err.Error(), "upgrade Lazaret") {
		t.Fatalf("Ensure err = %v, want prepared.ErrNewerFormat", err)
	}
	if _, _, err := Lookup(root, ref); !errors.Is(err, prepared.ErrNewerFormat) {
		t.Fatalf("Lookup err = %v", err)
	}

	for name, content := range map[string]string{
		"garbage":    "{not json",
		"no version": `{"id":"x"}`,
		"wrong id":   strings.Replace(string(b), a.ID, "pl-00000000000000000000000000000000", 1),
		"unknown":    strings.Replace(string(b), `"preparer"`, `"surprise": 1, "preparer"`, 1),
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}); !errors.Is(err, prepared.ErrCorrupt) {
			t.Errorf("%s: err = %v, want prepared.ErrCorrupt", name, err)
		}
	}
	// A symlinked record is never followed.
	os.Remove(path)
	os.WriteFile(filepath.Join(root, "elsewhere.json"), b, 0o644)
	os.Symlink(filepath.Join(root, "elsewhere.json"), path)
	if _, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}); !errors.Is(err, prepared.ErrCorrupt) {
		t.Errorf("symlinked record: err = %v, want prepared.ErrCorrupt", err)
	}
	// A missing mount point makes the artifact invalid.
	os.Remove(path)
	os.WriteFile(path, b, 0o644)
	if _, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}); err != nil {
		t.Fatalf("restored record: %v", err)
	}
	os.Remove(filepath.Join(a.Rootfs, "workspace"))
	if _, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}); !errors.Is(err, prepared.ErrCorrupt) {
		t.Errorf("missing mount point: err = %v, want prepared.ErrCorrupt", err)
	}
}

func TestSymlinkedStorageRootDirsRefused(t *testing.T) {
	requireRoot(t)
	ref := busyboxRef(t)
	root := t.TempDir()
	other := t.TempDir()
	if err := os.Symlink(other, filepath.Join(root, "prepared")); err != nil {
		t.Fatal(err)
	}
	_, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if err == nil || !strings.Contains(err.Error(), "not a plain directory") {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Fatalf("wrote through the symlink: %v", entries)
	}
}

func TestConcurrentPublishRace(t *testing.T) {
	requireRoot(t)
	ref := busyboxRef(t)

	// Deterministic: a foreign prepared/<id> appears while we hold the
	// preparation lock (no Lazaret preparer can publish without it): ours
	// is refused, the foreign tree is not touched, and our intent is
	// abandoned with its staging tree quarantined and deleted.
	root := t.TempDir()
	var foreign string
	_, err := ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}, hooks{beforePublish: func() {
		id := prepared.ArtifactID(resolvedDigest(t, ref))
		foreign = filepath.Join(root, preparedDir, id)
		if err := os.Mkdir(foreign, 0o755); err != nil {
			t.Error(err)
		}
	}})
	if err == nil || !strings.Contains(err.Error(), "appeared while this preparation held its lock") {
		t.Fatalf("publication over a foreign tree: %v", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("foreign tree touched: %v", err)
	}
	if n := stagingEntries(t, root); len(n) != 0 {
		t.Errorf("staging left: %v", n)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, preparedDir, trashDir)); len(ents) != 0 {
		t.Errorf("quarantine not deleted: %v", ents)
	}
	if ops, arts := catalogState(t, root); len(ops) != 0 || len(arts) != 0 {
		t.Errorf("catalog after an abandoned preparation: ops %v artifacts %v", ops, arts)
	}

	// Free-running: several goroutines race on a fresh root.
	root = t.TempDir()
	const n = 4
	results := make([]prepared.Artifact, n)
	errs := make([]error, n)
	progress := make([]bytes.Buffer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1, Progress: &progress[i]})
		}()
	}
	wg.Wait()
	// The preparation lock makes concurrent preparers of one image prepare
	// it once; the others reuse it.
	published := 0
	for i := range n {
		published += strings.Count(progress[i].String(), "prepare: published")
	}
	if published != 1 {
		t.Errorf("%d preparations published for %d concurrent Ensure calls, want 1", published, n)
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if results[i].ID != results[0].ID || !results[i].Created.Equal(results[0].Created) {
			t.Errorf("result %d = %+v, want %+v", i, results[i], results[0])
		}
	}
	if n := stagingEntries(t, root); len(n) != 0 {
		t.Errorf("staging left: %v", n)
	}
	// The Storage Catalog shows one preparation, recorded by the preparer.
	ops, arts := catalogState(t, root)
	if len(ops) != 1 || len(arts) != 1 || arts[0].GetState() != catalog.Published || arts[0].GetOrigin() != catalog.OriginPrepared ||
		arts[0].GetOperationId() != ops[0].GetOperationId() || ops[0].GetState().String() != "PREPARATION_OPERATION_STATE_PUBLISHED" {
		t.Errorf("catalog after concurrent preparation: ops %v artifacts %v", ops, arts)
	}
}

func TestInterruptedStagingIgnored(t *testing.T) {
	requireRoot(t)
	ref := busyboxRef(t)
	// A complete-looking tree in a staging directory that no prepare intent
	// names is not an artifact, and is never touched (not by the preparer,
	// not by gc), locked or not.
	src := t.TempDir()
	a, err := Ensure(context.Background(), Options{StorageRoot: src, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	staged := filepath.Join(root, preparedDir, stagingDir)
	if err := os.MkdirAll(staged, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deadbeef", "locked", a.ID} {
		if out, err := exec.Command("cp", "-a", a.Dir, filepath.Join(staged, name)).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		old := time.Now().Add(-time.Hour)
		os.Chtimes(filepath.Join(staged, name), old, old)
	}
	// "locked" belongs to a live preparation (flock locks are per open
	// file description, so holding one here is like another process).
	lock, err := os.Open(filepath.Join(staged, "locked"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	if _, found, err := Lookup(root, ref); found || err != nil {
		t.Fatalf("Lookup found=%v err=%v: staging mistaken for an artifact", found, err)
	}
	if _, found, err := prepared.LookupID(root, a.ID); found || err != nil {
		t.Fatalf("prepared.LookupID found=%v err=%v", found, err)
	}
	var progress bytes.Buffer
	b, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != a.ID || strings.Contains(progress.String(), "reusing") {
		t.Fatalf("Ensure %+v %q", b, progress.String())
	}
	if _, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{Keep: 5}, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if names := stagingEntries(t, root); strings.Join(names, ",") != "deadbeef,locked,"+a.ID {
		t.Errorf("staging after preparation and gc: %v, want every intent-less tree kept", names)
	}
}

func TestFailedPrepareRemovesStaging(t *testing.T) {
	requireRoot(t)
	// A layer whose blob does not match its digest.
	layout := filepath.Join(t.TempDir(), "img")
	if _, err := imagebuild.WriteLayout(context.Background(), layout, "t", imagebuild.ImageConfig{},
		layerTar(t, tarEntry{name: "f", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("x", 4096)})); err != nil {
		t.Fatal(err)
	}
	blobs, _ := filepath.Glob(filepath.Join(layout, "blobs/sha256/*"))
	var layer string
	for _, b := range blobs {
		if fi, _ := os.Stat(b); fi.Size() > 30 && !json.Valid(mustRead(t, b)) {
			layer = b
		}
	}
	data := mustRead(t, layer)
	data[len(data)-9] ^= 0xff // corrupt the gzip trailer (CRC)
	os.WriteFile(layer, data, 0o644)
	root := t.TempDir()
	_, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: "oci:" + layout + ":t", DomainID: testDomain, Generation: 1})
	if err == nil {
		t.Fatal("corrupt layer prepared")
	}
	t.Logf("corrupt layer: %v", err)
	if n := stagingEntries(t, root); len(n) != 0 {
		t.Errorf("staging left: %v", n)
	}
	entries, _ := os.ReadDir(filepath.Join(root, preparedDir))
	if len(entries) != 3 { // .staging, .locks and the emptied .trash: no artifact
		t.Errorf("prepared/ holds %v", entries)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, preparedDir, trashDir)); len(ents) != 0 {
		t.Errorf("quarantined staging tree not deleted: %v", ents)
	}
	if ops, arts := catalogState(t, root); len(ops) != 0 || len(arts) != 0 {
		t.Errorf("catalog after a failed preparation: ops %v artifacts %v", ops, arts)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadReferences(t *testing.T) {
	ref := busyboxRef(t)
	layout := strings.TrimSuffix(strings.TrimPrefix(ref, "oci:"), ":latest")
	root := t.TempDir()
	for _, tc := range []struct{ ref, want string }{
		{"", "no image reference"},
		{"busybox", "use oci:PATH"},
		{"nosuch:thing", `unknown transport "nosuch"`},
		{"oci:" + filepath.Join(root, "missing") + ":latest", "check that PATH is an OCI image layout"},
		{"oci:" + filepath.Join(root, "busybox") + ":latest", "the image layout at " + filepath.Join(root, "busybox") + " is missing or damaged: build it again with `lazaret image build busybox`"},
		{"oci:" + filepath.Join(root, "recipe-0123456789abcdef0123") + ":latest", "build it again with `lazaret image build PROFILE --force`"},
		{"oci:" + layout + ":nosuchtag", "nosuchtag"},
	} {
		_, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: tc.ref, DomainID: testDomain, Generation: 1})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrBadReference) {
			t.Errorf("%q: err = %v, want %q and ErrBadReference", tc.ref, err, tc.want)
		}
	}
	if _, err := Ensure(context.Background(), Options{StorageRoot: "relative", ImageRef: ref, DomainID: testDomain, Generation: 1}); err == nil {
		t.Error("relative storage root accepted")
	}
	if _, _, err := prepared.LookupID(root, "pl-nothex"); err == nil {
		t.Error("bad ID accepted")
	}
}

func TestArtifactID(t *testing.T) {
	a := prepared.ArtifactID("sha256:0000")
	if a != prepared.ArtifactID("sha256:0000") || a == prepared.ArtifactID("sha256:0001") || !prepared.ValidID(a) || len(a) != 35 {
		t.Fatalf("prepared.ArtifactID = %q", a)
	}
}

func TestCoversIDs(t *testing.T) {
	for _, tc := range []struct {
		m    string
		want bool
	}{
		{"         0          0 4294967295\n", true},
		{"0 1001 1\n1 100000 65536\n", true},
		{"0 1001 1\n", false},
		{"0 1001 1\n2 100000 65536\n", false},
		{"", false},
	} {
		if got := coversIDs(tc.m, 65536); got != tc.want {
			t.Errorf("coversIDs(%q) = %v", tc.m, got)
		}
	}
}

func TestBlobDigestMismatchRefused(t *testing.T) {
	requireRoot(t)
	layout := filepath.Join(t.TempDir(), "img")
	if _, err := imagebuild.WriteLayout(context.Background(), layout, "t", imagebuild.ImageConfig{},
		layerTar(t, tarEntry{name: "f", typ: tar.TypeReg, mode: 0o644, body: "content"})); err != nil {
		t.Fatal(err)
	}
	// Replace the layer blob by a different, well-formed gzip of the same
	// tar: decompression and diff ID succeed, the blob digest does not.
	blobs, _ := filepath.Glob(filepath.Join(layout, "blobs/sha256/*"))
	var replaced bool
	for _, b := range blobs {
		data := mustRead(t, b)
		if json.Valid(data) {
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(zr)
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression)
		zw.Write(raw)
		zw.Close()
		os.WriteFile(b, buf.Bytes(), 0o644)
		replaced = true
	}
	if !replaced {
		t.Fatal("no layer blob found")
	}
	root := t.TempDir()
	_, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: "oci:" + layout + ":t", DomainID: testDomain, Generation: 1})
	if err == nil || !strings.Contains(err.Error(), "does not match its digest") {
		t.Fatalf("err = %v, want a digest mismatch", err)
	}
	if n := stagingEntries(t, root); len(n) != 0 {
		t.Errorf("staging left: %v", n)
	}
}

// A start that reuses its prepared lower reads the image's manifest only
// (for a registry image: one request, not two); a preparation still reads
// and verifies the config.
func TestReuseReadsManifestOnly(t *testing.T) {
	requireRoot(t)
	layout := filepath.Join(t.TempDir(), "img")
	if _, err := imagebuild.WriteLayout(context.Background(), layout, "t", imagebuild.ImageConfig{},
		layerTar(t, tarEntry{name: "f", typ: tar.TypeReg, mode: 0o644, body: "content"})); err != nil {
		t.Fatal(err)
	}
	ref := "oci:" + layout + ":t"
	root := t.TempDir()
	a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	hex, ok := strings.CutPrefix(a.Source.ConfigDigest, "sha256:")
	if !ok {
		t.Fatalf("config digest %q", a.Source.ConfigDigest)
	}
	config := filepath.Join(layout, "blobs", "sha256", hex)
	if err := os.Rename(config, config+".aside"); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	b, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 2, Progress: &progress})
	if err != nil {
		t.Fatalf("reuse read the config blob: %v", err)
	}
	if b != a || !strings.Contains(progress.String(), "reusing") {
		t.Fatalf("second Ensure %+v (%q), want reuse of %+v", b, progress.String(), a)
	}
	other := t.TempDir()
	_, err = Ensure(context.Background(), Options{StorageRoot: other, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if err == nil || !strings.Contains(err.Error(), "read image config") {
		t.Fatalf("prepare without the config blob: err = %v, want a config read error", err)
	}
	if n := stagingEntries(t, other); len(n) != 0 {
		t.Errorf("staging left: %v", n)
	}
}
