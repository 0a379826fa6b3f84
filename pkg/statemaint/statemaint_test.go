package statemaint

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/diskuse"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/removal"
)

// TestIDMapLeavesOverflowUnmapped: namespace id 65534 stays unmapped, so an
// entry showing it is someone else's; every subordinate id is mapped once.
func TestIDMapLeavesOverflowUnmapped(t *testing.T) {
	got := strings.Join(idMap(1001, hostcheck.SubIDRange{Start: 100000, Count: 65536}), " ")
	if got != "0 1001 1 1 100000 65533 65535 165533 3" {
		t.Fatalf("map %q", got)
	}
	c := nsChecker(1001, 1001, 100000, 200000, 65536)
	for id, ok := range map[uint32]bool{0: true, 1: true, 65533: true, 65534: false, 65535: true, 65537: true, 65538: false} {
		if c.OwnerOK(id, 0) != ok {
			t.Errorf("uid %d: ok %v", id, !ok)
		}
	}
	for id, want := range map[uint32]string{0: "uid 0 (host 1001, you)", 1: "uid 1 (host 100000)", 65533: "uid 65533 (host 165532)", 65535: "uid 65534 (host 165533)", 65536: "uid 65535 (host 165534)", 65537: "uid of host id 165535 (no guest id)", 65534: "uid of an id outside your user and subordinate ids"} {
		if got := c.Describe(id, false); got != want {
			t.Errorf("describe %d: %q, want %q", id, got, want)
		}
	}
	if got := c.Describe(2, true); got != "gid 2 (host 200001)" {
		t.Errorf("gid: %q", got)
	}
}

func TestDecodeRefusesNewer(t *testing.T) {
	if _, err := decode([]byte(`{"version": 2, "scope": "anchors"}`)); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("newer report: %v", err)
	}
	if _, err := decode([]byte(`garbage`)); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	r, err := decode([]byte(`{"version": 1, "scope": "ignored", "ignored": {"present": true, "findings": [{"kind": "device", "path": "x", "detail": "d"}]}, "general": []}`))
	if err != nil || r.Findings() != 1 {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestCheckArgs: the purge operation takes a Storage Root and no Domain
// Root; the others a Domain Root, the id count and no Storage Root.
func TestCheckArgs(t *testing.T) {
	for _, c := range []struct {
		op, domainRoot, storageRoot string
		count                       uint
		ok                          bool
	}{
		{OpPurge, "", "/s/lazaret", 0, true},
		{OpPurge, "", "", 0, false},
		{OpPurge, "", "relative", 0, false},
		{OpPurge, "/s/lazaret/domains/x", "/s/lazaret", 0, false},
		{OpPurgePrepared, "", "/s/lazaret", 0, true},
		{OpPurgePrepared, "", "relative", 0, false},
		{OpPurgePrepared, "/s/lazaret/domains/x", "", 65536, false},
		{OpVerify, "/s/lazaret/domains/x", "", 65536, true},
		{OpVerify, "/s/lazaret/domains/x", "", 0, false},
		{OpVerify, "", "/s/lazaret", 65536, false},
		{OpIgnoredReset, "/s/lazaret/domains/x", "/s/lazaret", 65536, false},
	} {
		err := checkArgs(c.op, c.domainRoot, c.storageRoot, c.count)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, errdefs.ErrInvalid)) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestDecodePurgeResult: a newer result is refused, none is corrupt.
func TestDecodePurgeResult(t *testing.T) {
	var r PurgeResult
	if err := decodeResult([]byte(`{"version": 2, "deleted": 1}`), &r, func() int { return r.Version }); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("newer result: %v", err)
	}
	r = PurgeResult{}
	if err := decodeResult([]byte(`garbage`), &r, func() int { return r.Version }); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	r = PurgeResult{}
	if err := decodeResult([]byte(`{}`), &r, func() int { return r.Version }); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("no version: %v", err)
	}
	r = PurgeResult{}
	if err := decodeResult([]byte(`{"version": 1, "deleted": 3}`), &r, func() int { return r.Version }); err != nil || r.Deleted != 3 {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestMainPurge runs the role's purge operation in this process (the trash
// holds only this user's files, so no user namespace is needed): it
// deletes the trash, prints its result, and refuses bad arguments with
// status 2.
func TestMainPurge(t *testing.T) {
	sr := filepath.Join(t.TempDir(), "lazaret")
	for _, d := range []string{"domains/x", removal.TrashDir + "/domain-a.1/anchors/root/upper", removal.TrashDir + "/root-prepared.2/pl-x/rootfs"} {
		if err := os.MkdirAll(filepath.Join(sr, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := captureStdout(t, func() {
		if code := Main([]string{"--op=" + OpPurge, "--storage-root=" + sr}); code != 0 {
			t.Errorf("purge: exit %d", code)
		}
	})
	var r PurgeResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil || r.Deleted != 2 {
		t.Fatalf("result %q: %+v %v", out, r, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(sr, removal.TrashDir)); len(ents) != 0 {
		t.Fatalf("trash not deleted: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(sr, "domains/x")); err != nil {
		t.Fatalf("the purge touched what is not in the trash: %v", err)
	}
	for _, args := range [][]string{{"--op=" + OpPurge}, {"--op=" + OpPurge, "--storage-root=rel"}, {"--op=" + OpPurge, "--storage-root=" + sr, "--domain-root=" + sr + "/domains/x"}} {
		captureStdout(t, func() {
			if code := Main(args); code != 2 {
				t.Errorf("%v: exit %d", args, code)
			}
		})
	}
}

// TestMainPurgePrepared runs the role's purge-prepared operation in this
// process: it deletes the reclaimed trees of prepared/.trash (what gc moved
// aside), leaves a foreign trash entry, a published artifact and the
// removal trash alone, and prints how many it deleted.
func TestMainPurgePrepared(t *testing.T) {
	sr := filepath.Join(t.TempDir(), "lazaret")
	for _, d := range []string{"prepared/.staging", "prepared/pl-live/rootfs/etc", "prepared/.trash/pl-a.1/rootfs/usr/bin", "prepared/.trash/pl-b.2/rootfs", "prepared/.trash/foreign", removal.TrashDir + "/domain-a.1"} {
		if err := os.MkdirAll(filepath.Join(sr, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := captureStdout(t, func() {
		if code := Main([]string{"--op=" + OpPurgePrepared, "--storage-root=" + sr}); code != 0 {
			t.Errorf("purge-prepared: exit %d", code)
		}
	})
	var r PurgeResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil || r.Deleted != 2 {
		t.Fatalf("result %q: %+v %v", out, r, err)
	}
	ents, _ := os.ReadDir(filepath.Join(sr, "prepared/.trash"))
	if len(ents) != 1 || ents[0].Name() != "foreign" {
		t.Fatalf("prepared trash after the purge: %v, want only the foreign entry", ents)
	}
	for _, d := range []string{"prepared/pl-live/rootfs/etc", removal.TrashDir + "/domain-a.1"} {
		if _, err := os.Stat(filepath.Join(sr, d)); err != nil {
			t.Fatalf("the purge touched %s: %v", d, err)
		}
	}
	// No Storage Root yet: nothing to delete.
	out = captureStdout(t, func() {
		if code := Main([]string{"--op=" + OpPurgePrepared, "--storage-root=" + filepath.Join(t.TempDir(), "none")}); code != 0 {
			t.Errorf("purge-prepared without a Storage Root: exit %d", code)
		}
	})
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil || r.Deleted != 0 {
		t.Fatalf("result %q: %+v %v", out, r, err)
	}
}

func captureStdout(t *testing.T, fn func()) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, savedErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	fn()
	os.Stdout, os.Stderr = saved, savedErr
	w.Close()
	return <-done
}

func TestGuestID(t *testing.T) {
	for _, c := range []struct {
		ns, guest uint32
		ok        bool
	}{{0, 0, true}, {1, 1, true}, {1000, 1000, true}, {65533, 65533, true}, {65534, 0, false}, {65535, 65534, true}, {65536, 65535, true}, {65537, 0, false}} {
		g, ok := guestID(c.ns)
		if ok != c.ok || ok && g != c.guest {
			t.Errorf("guestID(%d) = %d, %v; want %d, %v", c.ns, g, ok, c.guest, c.ok)
		}
	}
}

// TestMainDiskUsageTrees runs the role's disk-usage operation in this
// process: --trees measures the trees it names alone; a malformed one is
// refused (exit 1) with the forms it takes.
func TestMainDiskUsageTrees(t *testing.T) {
	sr := filepath.Join(t.TempDir(), "lazaret")
	a, b := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	for _, id := range []string{a, b} {
		if err := os.MkdirAll(filepath.Join(sr, "domains", id, "anchors"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(sr, "domains", id, "anchors", "f"), make([]byte, 5000), 0o644)
	}
	out := captureStdout(t, func() {
		if code := Main([]string{"--op=" + OpDiskUsage, "--storage-root=" + sr, "--trees=anchors/" + a}); code != 0 {
			t.Errorf("disk-usage: exit %d", code)
		}
	})
	var r DiskUsageResult
	if err := decodeResult(out, &r, func() int { return r.Version }); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	if len(r.Domains) != 1 || r.Domains[a].Anchors.Bytes < 5000 {
		t.Errorf("--trees=anchors/%s measured %+v", a, r.Domains)
	}
	if _, err := parseTrees("anchors/" + a + ",other/x"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "anchors/DOMAIN-ID") {
		t.Errorf("a malformed tree: %v", err)
	}
	captureStdout(t, func() {
		if code := Main([]string{"--op=" + OpDiskUsage, "--storage-root=" + sr, "--trees=profile/../x"}); code != 1 {
			t.Errorf("a malformed --trees: exit %d", code)
		}
	})
}

// TestDiskUsageArgs: the trees go in one --trees argument, and more than
// one argument can hold are measured all at once instead.
func TestDiskUsageArgs(t *testing.T) {
	two := []diskuse.TreeKey{{Kind: diskuse.KindAnchors, Name: "a"}, {Kind: diskuse.KindProfile, Name: "claude"}}
	if got := strings.Join(diskUsageArgs("/s", two), " "); got != "--storage-root=/s --op=disk-usage --trees=anchors/a,profile/claude" {
		t.Errorf("two trees: %s", got)
	}
	if got := diskUsageArgs("/s", nil); len(got) != 2 {
		t.Errorf("every tree: %v", got)
	}
	many := make([]diskuse.TreeKey, maxTreesArg+1)
	for i := range many {
		many[i] = diskuse.TreeKey{Kind: diskuse.KindAnchors, Name: strings.Repeat("f", 32)}
	}
	if got := diskUsageArgs("/s", many); len(got) != 2 {
		t.Errorf("%d trees: %d arguments", len(many), len(got))
	}
	if n := maxTreesArg * len("ignored/"+strings.Repeat("f", 32)+","); n >= 128<<10 {
		t.Errorf("maxTreesArg trees make a %d-byte argument, over the kernel's 128 KiB", n)
	}
}
