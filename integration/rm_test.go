package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/failpoint"
)

// rmEnv is the environment of the rm scenarios: a Storage Root of their own
// (rm --all removes everything in it, which must not be other scenarios'
// Domains) and a data directory with a stand-in for the built images
// (--images removes it; the real images of the test user stay).
type rmEnv struct {
	e           *env
	stateHome   string
	storageRoot string
	dataHome    string
	env         []string
}

func newRmEnv(t *testing.T) *rmEnv {
	e := need(t)
	r := &rmEnv{e: e, stateHome: e.userDir("rm-state-" + randHex(3)), dataHome: e.userDir("rm-data-" + randHex(3))}
	r.storageRoot = filepath.Join(r.stateHome, "lazaret")
	images := filepath.Join(r.dataHome, "lazaret", "images", "stand-in")
	os.MkdirAll(images, 0o755)
	os.WriteFile(filepath.Join(images, "index.json"), []byte("{}\n"), 0o644)
	for _, p := range []string{filepath.Join(r.dataHome, "lazaret"), filepath.Dir(images), images, filepath.Join(images, "index.json")} {
		os.Chown(p, e.uid, e.gid)
	}
	r.env = []string{"XDG_STATE_HOME=" + r.stateHome}
	return r
}

// lz runs lazaret (bin: the binaries' directory) with the scenario's
// Storage Root and extra environment.
func (r *rmEnv) lz(t *testing.T, bin, dir string, stdin io.Reader, extra []string, args ...string) result {
	t.Helper()
	c := r.e.cmdWith(bin, dir, append(append([]string{}, r.env...), extra...), args...)
	var out, errb bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = stdin, &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		c.Process.Kill()
		<-done
		t.Fatalf("lazaret %v timed out; stderr: %s", args, errb.String())
	}
	return result{out.String(), errb.String(), c.ProcessState.ExitCode()}
}

func (r *rmEnv) run(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return r.lz(t, r.e.bin, dir, nil, nil, args...)
}

// images is the stand-in's path, given XDG_DATA_HOME=r.dataHome.
func (r *rmEnv) images() string { return filepath.Join(r.dataHome, "lazaret", "images") }

// domainRoot is the Domain Root of ws with the tiny profile.
func (r *rmEnv) domainRoot(ws string) string {
	return filepath.Join(r.storageRoot, "domains", string(domainOf(ws, "tiny")))
}

// trash lists what waits in the Storage Root's trash.
func (r *rmEnv) trash(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(r.storageRoot, ".trash"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		out = append(out, d.Name())
	}
	return out
}

// filesUnder lists every entry beneath dir that is not a directory.
func filesUnder(dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// subordinateState gives what the sandbox wrote in ws's Domain the owners a
// sandbox user other than root leaves (a tar extracted as another user, a
// service account): subordinate ids, in private directories, so that the
// developer can neither list nor delete them — and checks that `rm -rf` as
// the developer indeed fails there.
func (r *rmEnv) subordinateState(t *testing.T, ws string) {
	t.Helper()
	e := r.e
	root := r.domainRoot(ws)
	for _, tree := range []struct {
		path string
		id   int
	}{{filepath.Join(root, "anchors", "root", "upper", "priv"), e.subStart + 1000}, {filepath.Join(root, "ignored-state", "node_modules"), e.subStart + 999}} {
		if _, err := os.Stat(tree.path); err != nil {
			t.Fatalf("the sandbox's state is not where expected: %v", err)
		}
		filepath.Walk(tree.path, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			os.Lchown(p, tree.id, tree.id)
			if fi.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	}
	c := r.e.cmdWith(e.bin, "/", nil, "x")
	c.Path, c.Args = "/bin/rm", []string{"rm", "-rf", filepath.Join(root, "anchors", "root", "upper", "priv")}
	if out, err := c.CombinedOutput(); err == nil {
		t.Fatalf("the developer could delete subordinate-id state directly (the test would prove nothing): %s", out)
	}
}

// TestRmDomainState (SR-14, OR-5): `lazaret rm` removes one stopped
// Domain's whole Domain Root — State Anchor uppers and Ignored Workspace
// State owned by subordinate ids in directories the developer cannot enter
// included — and nothing else (another Domain, the prepared image, the
// workspace stay); it refuses while the Domain or (for --all) any Domain
// is active, naming it, and without --yes off a terminal; the next run
// starts afresh. `lazaret rm --all --yes` then leaves no file under the
// Storage Root and, without --images, keeps the built images; --images
// removes them.
func TestRmDomainState(t *testing.T) {
	r := newRmEnv(t)
	e := r.e
	ws1, ws2 := workspace(t), workspace(t)
	ignoredRepo(t, e, ws1, "lazaret-marker-"+randHex(6))
	res := r.run(t, ws1, "run", "-p", "tiny", "--", "sh", "-c",
		"mkdir -p /root/priv/deep && echo secret > /root/priv/deep/f && cd /workspace && mkdir -p node_modules/pkg && echo m > node_modules/pkg/index.js && echo ok")
	if res.code != 0 || !strings.HasSuffix(res.stdout, "ok\n") {
		t.Fatalf("run ws1: %+v", res)
	}
	if res = r.run(t, ws2, "run", "-p", "tiny", "--", "sh", "-c", "echo keep > /root/keep && echo ok"); res.code != 0 {
		t.Fatalf("run ws2: %+v", res)
	}
	noLeftovers(t)
	r.subordinateState(t, ws1)

	// Active: refused, naming the Domain; --yes does not bypass it.
	in, _, wait := r.hold(t, ws1)
	for _, args := range [][]string{{"rm", "-p", "tiny", "-C", ws1, "--yes"}, {"rm", "--all", "--yes"}} {
		res = r.run(t, ws2, args...)
		if res.code == 0 || !strings.Contains(res.stderr, "is active") || !strings.Contains(res.stderr, string(domainOf(ws1, "tiny"))) {
			t.Errorf("%v while ws1's Domain runs: %+v", args, res)
		}
	}
	in.Close()
	wait()
	noLeftovers(t)
	if _, err := os.Stat(filepath.Join(r.domainRoot(ws1), "domain.json")); err != nil {
		t.Fatalf("a refused rm touched the Domain Root: %v", err)
	}

	// Off a terminal, without --yes: refused, nothing removed.
	if res = r.run(t, ws1, "rm", "-p", "tiny"); res.code != 2 || !strings.Contains(res.stderr, "--yes") {
		t.Errorf("rm without --yes off a terminal: %+v", res)
	}
	res = r.run(t, ws1, "rm", "-p", "tiny", "--yes", "--json")
	if res.code != 0 || !strings.Contains(res.stderr, string(domainOf(ws1, "tiny"))) {
		t.Fatalf("rm: %+v", res)
	}
	var rep struct {
		Domains []struct {
			DomainID string `json:"domain_id"`
		} `json:"domains"`
		TrashDeleted int `json:"trash_deleted"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || len(rep.Domains) != 1 || rep.Domains[0].DomainID != string(domainOf(ws1, "tiny")) || rep.TrashDeleted != 1 {
		t.Errorf("rm --json: %v %+v\n%s", err, rep, res.stdout)
	}
	if _, err := os.Lstat(r.domainRoot(ws1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the Domain Root is still there: %v", err)
	}
	if left := r.trash(t); len(left) != 0 {
		t.Errorf("the trash still holds %v (subordinate-id files not deleted?)", left)
	}
	if _, err := os.Stat(filepath.Join(r.domainRoot(ws2), "anchors", "root", "upper", "keep")); err != nil {
		t.Errorf("another Domain's state was touched: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(r.storageRoot, "prepared", "pl-*")); len(m) == 0 {
		t.Errorf("the prepared image was removed by a single-Domain rm")
	}
	if _, err := os.Stat(filepath.Join(ws1, "node_modules", "host-pkg", "index.js")); err != nil {
		t.Errorf("the workspace was touched: %v", err)
	}
	if res = r.run(t, ws1, "rm", "-p", "tiny", "--yes"); res.code != 0 || !strings.Contains(res.stderr, "nothing to remove") {
		t.Errorf("rm of a removed Domain: %+v", res)
	}
	// The next run starts afresh.
	res = r.run(t, ws1, "run", "-p", "tiny", "--", "sh", "-c", "test -e /root/priv || echo fresh; test -e /workspace/node_modules/pkg || echo fresh-ignored")
	if res.code != 0 || res.stdout != "fresh\nfresh-ignored\n" {
		t.Errorf("run after rm: %+v", res)
	}
	noLeftovers(t)

	// Everything: no file left under the Storage Root; the built images
	// stay without --images.
	res = r.lz(t, e.bin, ws1, nil, []string{"XDG_DATA_HOME=" + r.dataHome}, "rm", "--all", "--yes")
	if res.code != 0 || !strings.Contains(res.stderr, string(domainOf(ws2, "tiny"))) {
		t.Fatalf("rm --all: %+v", res)
	}
	if f := filesUnder(r.storageRoot); len(f) != 0 {
		t.Errorf("rm --all left files under the Storage Root: %v", f)
	}
	if _, err := os.Lstat(r.storageRoot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rm --all left the Storage Root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.images(), "stand-in", "index.json")); err != nil {
		t.Errorf("rm --all without --images removed the images: %v", err)
	}
	res = r.lz(t, e.bin, ws1, nil, []string{"XDG_DATA_HOME=" + r.dataHome}, "rm", "--all", "--images", "--yes")
	if res.code != 0 {
		t.Fatalf("rm --all --images: %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(r.dataHome, "lazaret")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rm --all --images left %s: %v", filepath.Join(r.dataHome, "lazaret"), err)
	}
	if _, err := os.Stat(filepath.Join(e.home, ".local/share/lazaret/images/busybox/index.json")); err != nil {
		t.Errorf("the test user's real images are gone: %v", err)
	}
	noLeftovers(t)
}

// TestRmCrashConsistency (OR-5): `lazaret rm` killed after its rename
// leaves the Domain gone (not half-deleted: its Domain Root is wholly in
// the trash), and the next `lazaret run` of any Domain deletes the trash;
// `lazaret rm --all` killed there leaves only the trash, which the next
// `lazaret rm --all` deletes, with the Storage Root.
func TestRmCrashConsistency(t *testing.T) {
	needFailpoints(t)
	r := newRmEnv(t)
	e := r.e
	fp := []string{failpoint.Env + "=" + "lazaret:rm:moved"}
	ws1, ws2 := workspace(t), workspace(t)
	for _, ws := range []string{ws1, ws2} {
		if res := r.run(t, ws, "run", "-p", "tiny", "--", "sh", "-c", "mkdir -p /root/priv && echo v > /root/priv/v && echo ok"); res.code != 0 {
			t.Fatalf("run: %+v", res)
		}
	}
	noLeftovers(t)
	priv := filepath.Join(r.domainRoot(ws1), "anchors", "root", "upper", "priv")
	os.Lchown(filepath.Join(priv, "v"), e.subStart+1000, e.subStart+1000)
	os.Lchown(priv, e.subStart+1000, e.subStart+1000)
	os.Chmod(priv, 0o700)

	res := r.lz(t, e.binFP, ws1, nil, fp, "rm", "-p", "tiny", "--yes")
	if res.code == 0 || !strings.Contains(res.stderr, "failpoint hit: lazaret:rm:moved") {
		t.Fatalf("rm with the failpoint armed: %+v", res)
	}
	if _, err := os.Lstat(r.domainRoot(ws1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after the interrupted rm the Domain Root is in place: %v", err)
	}
	if left := r.trash(t); len(left) != 1 || !strings.HasPrefix(left[0], "domain-"+string(domainOf(ws1, "tiny"))) {
		t.Fatalf("the trash holds %v, want the Domain Root", left)
	}
	// The next run of another Domain finishes the deletion.
	if res = r.run(t, ws2, "run", "-p", "tiny", "--", "true"); res.code != 0 {
		t.Fatalf("run after the interrupted rm: %+v", res)
	}
	noLeftovers(t)
	if left := r.trash(t); len(left) != 0 {
		t.Errorf("the next run left the trash: %v", left)
	}

	res = r.lz(t, e.binFP, ws1, nil, fp, "rm", "--all", "--yes")
	if res.code == 0 || !strings.Contains(res.stderr, "failpoint hit: lazaret:rm:moved") {
		t.Fatalf("rm --all with the failpoint armed: %+v", res)
	}
	ents, _ := os.ReadDir(r.storageRoot)
	if len(ents) != 1 || ents[0].Name() != ".trash" || len(r.trash(t)) == 0 {
		t.Fatalf("after the interrupted rm --all the Storage Root holds %v, trash %v", ents, r.trash(t))
	}
	res = r.run(t, ws1, "rm", "--all", "--yes")
	if res.code != 0 || !strings.Contains(res.stdout, "removed "+r.storageRoot) {
		t.Fatalf("rm --all after the interrupted one: %+v", res)
	}
	if f := filesUnder(r.storageRoot); len(f) != 0 {
		t.Errorf("files left under the Storage Root: %v", f)
	}
	noLeftovers(t)
}

// hold starts `lazaret run -p tiny` of ws with a session that waits for a
// line on stdin and returns once it is up.
func (r *rmEnv) hold(t *testing.T, ws string) (io.WriteCloser, *bytes.Buffer, func() int) {
	t.Helper()
	return holdSessionEnv(t, ws, "tiny", r.env)
}

// newRmEnvRanOnce is a private Storage Root whose tiny Domain of a new
// workspace ran once and left nothing behind.
func newRmEnvRanOnce(t *testing.T) (*rmEnv, string) {
	t.Helper()
	r := newRmEnv(t)
	ws := workspace(t)
	if res := r.run(t, ws, "run", "-p", "tiny", "--", "true"); res.code != 0 {
		t.Fatalf("first run: %d\n%s", res.code, res.stderr)
	}
	noLeftovers(t)
	return r, ws
}

// TestCorruptCatalogNamesTheWayOut (DX-5): a Storage Catalog that cannot
// be read stops every start with the way out; following it (every Domain
// stopped, the catalog moved aside) the next start prepares its image
// again and runs, and a stop and a later start work on the new catalog.
func TestCorruptCatalogNamesTheWayOut(t *testing.T) {
	parallel(t)
	r, ws := newRmEnvRanOnce(t)
	dir := filepath.Join(r.storageRoot, "catalog")
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatalf("no catalog manifest in %s", dir)
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, []byte("not a pebble manifest"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	res := r.run(t, ws, "run", "-p", "tiny", "--", "true")
	want := "the Storage Catalog at " + dir + " cannot be read; stop every Domain (`lazaret stop --all`), move it aside (`mv " + dir + " " + dir + ".broken`) and retry"
	if res.code != 125 || !strings.Contains(res.stderr, want) {
		t.Fatalf("run over a corrupt catalog: %d\n%s\nwant %q", res.code, res.stderr, want)
	}
	noLeftovers(t)
	if res := r.run(t, ws, "stop", "--all"); res.code != 0 {
		t.Fatalf("stop --all: %d\n%s", res.code, res.stderr)
	}
	if err := os.Rename(dir, dir+".broken"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if res := r.run(t, ws, "run", "-p", "tiny", "--", "echo", "again"); res.code != 0 || res.stdout != "again\n" {
			t.Fatalf("run %d after moving the catalog aside: %d %q\n%s", i, res.code, res.stdout, res.stderr)
		}
		noLeftovers(t)
	}
}

// TestDamagedPreparedImageReclaimed (DX-5, OR-7): a prepared image whose
// record is damaged fails the starts of its image with the way out; `lazaret
// gc` reclaims it whatever its policy (unless a running Domain holds it),
// and the next start prepares the image again.
func TestDamagedPreparedImageReclaimed(t *testing.T) {
	parallel(t)
	r, ws := newRmEnvRanOnce(t)
	arts, _ := filepath.Glob(filepath.Join(r.storageRoot, "prepared", "pl-*"))
	if len(arts) != 1 {
		t.Fatalf("prepared artifacts: %v", arts)
	}
	if err := os.WriteFile(filepath.Join(arts[0], "artifact.json"), []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.run(t, ws, "run", "-p", "tiny", "--", "true")
	if res.code != 125 || !strings.Contains(res.stderr, "prepared artifact is corrupt") || !strings.Contains(res.stderr, "`lazaret gc` reclaims a damaged prepared image") {
		t.Fatalf("run over a damaged prepared image: %d\n%s", res.code, res.stderr)
	}
	noLeftovers(t)
	// The policy would keep it (the most recent one): damaged, it goes.
	res = r.run(t, ws, "gc", "--json", "--keep", "5")
	if res.code != 0 || !strings.Contains(res.stdout, "damaged") || !strings.Contains(res.stdout, `"reclaimed"`) {
		t.Fatalf("gc of a damaged prepared image: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := os.Stat(arts[0]); !os.IsNotExist(err) {
		t.Fatalf("the damaged tree is still there: %v", err)
	}
	if res := r.run(t, ws, "run", "-p", "tiny", "--", "echo", "prepared again"); res.code != 0 || res.stdout != "prepared again\n" {
		t.Fatalf("run after gc: %d %q\n%s", res.code, res.stdout, res.stderr)
	}
	noLeftovers(t)
}

// TestCorruptIdentityRemovedByID (DX-5, SR-11): a Domain whose stored
// identity cannot be read is not started, and the refusal names
// `lazaret rm --domain ID`, which removes exactly that Domain (not another
// stopped one) although its identity cannot be checked; the next run
// starts afresh.
func TestCorruptIdentityRemovedByID(t *testing.T) {
	parallel(t)
	r, ws := newRmEnvRanOnce(t)
	other := workspace(t)
	if res := r.run(t, other, "run", "-p", "tiny", "--", "true"); res.code != 0 {
		t.Fatalf("other run: %d\n%s", res.code, res.stderr)
	}
	noLeftovers(t)
	id := domainOf(ws, "tiny")
	root := filepath.Join(r.storageRoot, "domains", string(id))
	if err := os.WriteFile(filepath.Join(root, "domain.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := r.run(t, ws, "run", "-p", "tiny", "--", "true")
	if res.code != 125 || !strings.Contains(res.stderr, "`lazaret rm --domain "+string(id)+"` removes this Domain's state") {
		t.Fatalf("run over an unreadable identity: %d\n%s", res.code, res.stderr)
	}
	if res := r.run(t, ws, "rm", "--domain", string(id), "--yes"); res.code != 0 || !strings.Contains(res.stdout, "removed Domain "+string(id)) {
		t.Fatalf("rm --domain: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("the Domain Root is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.storageRoot, "domains", string(domainOf(other, "tiny")))); err != nil {
		t.Fatalf("rm --domain touched another Domain: %v", err)
	}
	if res := r.run(t, ws, "run", "-p", "tiny", "--", "echo", "afresh"); res.code != 0 || res.stdout != "afresh\n" {
		t.Fatalf("run after rm --domain: %d %q\n%s", res.code, res.stdout, res.stderr)
	}
	noLeftovers(t)
}
