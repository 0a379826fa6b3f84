package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/imagebuild"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/pty"
)

// freshImage writes an OCI layout only this test uses: the test user's
// busybox layers plus one layer with a unique file, so its manifest (and
// prepared-artifact ID) is new. It returns a config whose profile "fresh"
// runs it.
func freshImage(t *testing.T) (image, cfg string) {
	t.Helper()
	e := need(t)
	src := filepath.Join(e.home, ".local/share/lazaret/images/busybox")
	blob := func(d string) []byte {
		b, err := os.ReadFile(filepath.Join(src, "blobs", strings.Replace(d, ":", "/", 1)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var index struct{ Manifests []struct{ Digest string } }
	idx, err := os.ReadFile(filepath.Join(src, "index.json"))
	if err != nil || json.Unmarshal(idx, &index) != nil || len(index.Manifests) == 0 {
		t.Fatalf("busybox index: %v", err)
	}
	var manifest struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var layers []io.Reader
	for _, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blob(l.Digest)))
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, zr)
	}
	var extra bytes.Buffer
	tw := tar.NewWriter(&extra)
	body := "fresh " + t.Name() + " " + randHex(8) + "\n"
	tw.WriteHeader(&tar.Header{Name: "etc/fresh", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1, 0)})
	tw.Write([]byte(body))
	tw.Close()
	layers = append(layers, &extra)
	dir := e.userDir("img-" + randHex(4))
	layout := filepath.Join(dir, "layout")
	if _, err := imagebuild.WriteLayout(context.Background(), layout, "latest", imagebuild.ImageConfig{}, layers...); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { os.Lchown(p, e.uid, e.gid); return nil })
	image = "oci:" + layout + ":latest"
	cfg = filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[profiles.fresh]\nimage = \""+image+"\"\npersistent_paths = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)
	return image, cfg
}

// catalogState reads the Storage Catalog as root and gives its files back
// to the test user.
func catalogState(t *testing.T) (ops []*v1.PreparationOperationRecordV1, arts []*v1.PreparedArtifactRecordV1) {
	t.Helper()
	e := need(t)
	root := filepath.Join(e.stateHome, "lazaret")
	defer filepath.Walk(filepath.Join(root, catalog.Dir), func(p string, _ os.FileInfo, _ error) error { os.Lchown(p, e.uid, e.gid); return nil })
	cat, err := catalog.New(root, catalog.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.View(context.Background(), func(tx *catalog.Tx) error {
		if ops, err = tx.Operations(); err != nil {
			return err
		}
		arts, err = tx.Artifacts()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ops, arts
}

func artifactOf(arts []*v1.PreparedArtifactRecordV1, image string) *v1.PreparedArtifactRecordV1 {
	for _, a := range arts {
		if a.GetImageName() == image {
			return a
		}
	}
	return nil
}

func opsOf(ops []*v1.PreparationOperationRecordV1, image string) (n int, running []*v1.PreparationOperationRecordV1) {
	for _, op := range ops {
		if op.GetImageName() == image {
			n++
			if op.GetState() == v1.PreparationOperationState_PREPARATION_OPERATION_STATE_RUNNING {
				running = append(running, op)
			}
		}
	}
	return n, running
}

// TestSpec35PrepareOnceConcurrentDomains (§3.5): two Domains starting at
// the same time on an image never prepared prepare it once: one
// preparation operation, recorded by the preparer with the image's
// identity, Published; the Domain whose stderr is a terminal shows the
// preparation's progress (layers, bytes) or the reuse; neither Domain
// leaves anything behind.
func TestSpec35PrepareOnceConcurrentDomains(t *testing.T) {
	e := need(t)
	image, cfg := freshImage(t)
	ws1, ws2 := workspace(t), workspace(t)
	m, slave, err := pty.Open(pty.Size{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	slave.Chown(e.uid, e.gid)
	var wg sync.WaitGroup
	var outs [2]bytes.Buffer
	var errs [2]bytes.Buffer
	var codes [2]int
	for i, ws := range []string{ws1, ws2} {
		c := e.cmd(ws, nil, "run", "--config", cfg, "-p", "fresh", "--", "cat", "/etc/fresh")
		c.Stdout = &outs[i]
		c.Stderr = &errs[i]
		if i == 0 {
			c.Stderr = slave
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.Wait(); codes[i] = c.ProcessState.ExitCode() }()
	}
	var term bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 4096)
		for {
			m.SetReadDeadline(time.Now().Add(3 * time.Minute))
			n, err := m.Read(buf)
			term.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	wg.Wait()
	slave.Close()
	m.SetReadDeadline(time.Now().Add(time.Second))
	<-readDone
	for i := range codes {
		if codes[i] != 0 || !strings.HasPrefix(outs[i].String(), "fresh ") {
			t.Fatalf("Domain %d: exit %d stdout %q stderr %q terminal %q", i, codes[i], outs[i].String(), errs[i].String(), term.String())
		}
	}
	noLeftovers(t)
	ops, arts := catalogState(t)
	n, running := opsOf(ops, image)
	a := artifactOf(arts, image)
	if n != 1 || len(running) != 0 || a == nil || a.GetState() != catalog.Published || a.GetOrigin() != catalog.OriginPrepared {
		t.Fatalf("prepared %d times (running %v), record %v", n, running, a)
	}
	if len(a.GetLayerDigests()) < 2 || a.GetConfigDigest() == "" || a.GetManifestDigest() == "" || a.GetRootfsBytes() == 0 {
		t.Errorf("source identity not recorded: %v", a)
	}
	tt := term.String()
	if !strings.Contains(tt, "lazaret: prepare: layer 1/") && !strings.Contains(tt, "lazaret: prepare: reusing") {
		t.Errorf("no preparation progress on the terminal: %q", tt)
	}
	t.Logf("terminal:\n%s", tt)
	if strings.Contains(errs[1].String(), "prepare:") {
		t.Errorf("progress on a stderr that is not a terminal: %q", errs[1].String())
	}
}

func gcJSON(t *testing.T, bin string, extraEnv []string, args ...string) (gcReport, result) {
	t.Helper()
	e := need(t)
	c := e.cmdWith(bin, workspace(t), extraEnv, append([]string{"gc", "--json"}, args...)...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	c.Run()
	r := result{out.String(), errb.String(), c.ProcessState.ExitCode()}
	var g gcReport
	if r.code == 0 {
		if err := json.Unmarshal(out.Bytes(), &g); err != nil {
			t.Fatalf("gc json: %v\n%s", err, out.String())
		}
	}
	return g, r
}

// TestOR7GCReclaimsAbandonedPrepareThroughIntent (OR-7, §3.5): a
// preparation SIGKILLed after staging leaves a staging tree and its Running
// prepare intent; while another preparation is live (paused after staging,
// its lock held), gc reclaims the abandoned tree through its intent and
// keeps the live one and a staging tree no intent names; gc deletes the
// quarantined tree inside the user namespace at once (the live preparation
// untouched); the killed image prepares again and nothing is left.
func TestOR7GCReclaimsAbandonedPrepareThroughIntent(t *testing.T) {
	e := needFailpoints(t)
	imageA, cfgA := freshImage(t)
	imageB, cfgB := freshImage(t)
	staging := filepath.Join(e.stateHome, "lazaret", "prepared", ".staging")
	// A: killed after staging.
	runningA := killedPreparation(t, "prepare:staged", imageA, cfgA)
	deadName := runningA[0].GetStagingName()
	if _, err := os.Stat(filepath.Join(staging, deadName, "artifact.json")); err != nil {
		t.Fatalf("abandoned staging tree: %v", err)
	}
	// A staging tree no intent names.
	orphan := filepath.Join(staging, "no-intent-"+randHex(3))
	os.Mkdir(orphan, 0o755)
	os.Chown(orphan, e.uid, e.gid)
	defer os.Remove(orphan)
	// B: a live preparation paused after staging.
	wsB := workspace(t)
	cb := e.cmdWith(e.binFP, wsB, []string{failpoint.Env + "=prepare:pause-staged"}, "run", "--config", cfgB, "-p", "fresh", "--", "cat", "/etc/fresh")
	var outB, errB bytes.Buffer
	cb.Stdout, cb.Stderr = &outB, &errB
	if err := cb.Start(); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan struct{})
	go func() { cb.Wait(); close(bDone) }()
	var liveName string
	deadline := time.Now().Add(90 * time.Second)
	for liveName == "" {
		if time.Now().After(deadline) {
			t.Fatalf("live preparation never staged: %s", errB.String())
		}
		time.Sleep(200 * time.Millisecond)
		for _, n := range stagingNames(t) {
			if n == deadName || n == filepath.Base(orphan) {
				continue
			}
			if _, err := os.Stat(filepath.Join(staging, n, "artifact.json")); err == nil {
				liveName = n
			}
		}
	}
	ops, _ := catalogState(t)
	if _, r := opsOf(ops, imageB); len(r) != 1 || r[0].GetStagingName() != liveName {
		t.Fatalf("live preparation's intent: %v (staging %s)", r, liveName)
	}
	g, r := gcJSON(t, e.bin, nil, "--keep", "100")
	if r.code != 0 {
		t.Fatalf("gc: %+v", r)
	}
	got := map[string]string{}
	for _, en := range g.Entries {
		got[en.Name] = en.Action + ": " + en.Reason
	}
	if a := got[".staging/"+deadName]; !strings.HasPrefix(a, "reclaimed: abandoned prepare intent") {
		t.Errorf("abandoned tree: %q (%+v)", a, g)
	}
	if a := got[".staging/"+liveName]; !strings.HasPrefix(a, "keep: preparation in progress") {
		t.Errorf("live tree: %q (%+v)", a, g)
	}
	if a := got[".staging/"+filepath.Base(orphan)]; !strings.HasPrefix(a, "keep: no prepare intent") {
		t.Errorf("intent-less tree: %q", a)
	}
	if _, err := os.Stat(filepath.Join(staging, deadName)); !os.IsNotExist(err) {
		t.Errorf("abandoned tree still staged: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.stateHome, "lazaret", "prepared", ".trash", "stg-"+deadName)); !os.IsNotExist(err) || g.TrashDeleted == 0 {
		t.Errorf("quarantined tree not deleted by gc: %v (%+v)", err, g)
	}
	select {
	case <-bDone:
	case <-time.After(2 * time.Minute):
		cb.Process.Kill()
		t.Fatal("live preparation never finished")
	}
	if cb.ProcessState.ExitCode() != 0 || !strings.HasPrefix(outB.String(), "fresh ") {
		t.Fatalf("live preparation's run: %d %q %s", cb.ProcessState.ExitCode(), outB.String(), errB.String())
	}
	noLeftovers(t)
	// A prepares again.
	if r := lz(t, workspace(t), nil, "run", "--config", cfgA, "-p", "fresh", "--", "cat", "/etc/fresh"); r.code != 0 || !strings.HasPrefix(r.stdout, "fresh ") {
		t.Fatalf("run after gc: %+v", r)
	}
	noLeftovers(t)
	if ents, _ := os.ReadDir(filepath.Join(e.stateHome, "lazaret", "prepared", ".trash")); len(ents) != 0 {
		t.Errorf("trash not deleted: %v", ents)
	}
	ops, arts := catalogState(t)
	for _, img := range []string{imageA, imageB} {
		if _, r := opsOf(ops, img); len(r) != 0 || artifactOf(arts, img).GetState() != catalog.Published {
			t.Errorf("%s: running %v record %v", img, r, artifactOf(arts, img))
		}
	}
	if n := stagingNames(t); len(n) != 1 {
		t.Errorf("staging after the scenario: %v (want only the intent-less tree)", n)
	}
}

// TestSpec35PinnedRegistryImageReusedOffline (§3.5): a profile whose image
// is a registry reference pinned to a manifest digest reuses the prepared
// lower of that manifest without the registry: the lower is the content
// the digest names. The image is prepared from a local layout, then run
// as docker://127.0.0.1:1/fresh@DIGEST — a registry that cannot answer
// (loopback port 1: any request would be refused at once, and nothing
// leaves the host) — and the start reuses the same artifact.
func TestSpec35PinnedRegistryImageReusedOffline(t *testing.T) {
	e := need(t)
	image, cfg := freshImage(t)
	if r := lz(t, workspace(t), nil, "run", "--config", cfg, "-p", "fresh", "--", "cat", "/etc/fresh"); r.code != 0 || !strings.HasPrefix(r.stdout, "fresh ") {
		t.Fatalf("run of the layout: %+v", r)
	}
	_, arts := catalogState(t)
	a := artifactOf(arts, image)
	if a.GetState() != catalog.Published {
		t.Fatalf("layout's artifact: %v", a)
	}
	pinned := "docker://127.0.0.1:1/fresh@" + a.GetManifestDigest()
	pcfg := filepath.Join(filepath.Dir(cfg), "pinned.toml")
	if err := os.WriteFile(pcfg, []byte("[profiles.pinned]\nimage = \""+pinned+"\"\npersistent_paths = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(pcfg, e.uid, e.gid)
	r := lz(t, workspace(t), nil, "run", "--config", pcfg, "-p", "pinned", "--", "cat", "/etc/fresh")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "fresh ") {
		t.Fatalf("run of the pinned registry reference: %+v", r)
	}
	ops, arts := catalogState(t)
	if n, _ := opsOf(ops, pinned); n != 0 || artifactOf(arts, pinned) != nil {
		t.Errorf("the pinned reference prepared again: %d operations, artifact %v", n, artifactOf(arts, pinned))
	}
	noLeftovers(t)
}

// killedPreparation runs profile "fresh" of cfg with failpoint fp armed,
// requires the run to fail and to leave nothing of the test user running
// or mounted, and returns the one Running prepare intent it left for image.
func killedPreparation(t *testing.T, fp, image, cfg string) []*v1.PreparationOperationRecordV1 {
	t.Helper()
	e := need(t)
	c := e.cmdWith(e.binFP, workspace(t), []string{failpoint.Env + "=" + fp}, "run", "--config", cfg, "-p", "fresh", "--", "true")
	var errb bytes.Buffer
	c.Stderr = &errb
	c.Run()
	if c.ProcessState.ExitCode() == 0 {
		t.Fatalf("run killed at %s succeeded: %s", fp, errb.String())
	}
	noProcessesOrMounts(t)
	ops, _ := catalogState(t)
	_, running := opsOf(ops, image)
	if len(running) != 1 {
		t.Fatalf("preparation killed at %s left intents %v (stderr %s)", fp, running, errb.String())
	}
	return running
}

// TestSpec35PreparerDiesWithTheSupervisor (§3.5, OR-7): lazaret-rs links
// no image library and runs the preparer (lazaret-cli's hidden role) as its
// child. A supervisor killed while its preparer works (failpoint
// lazaret-rs:preparer-progress, after the prepare intent) takes the
// preparer with it — nothing of the start is left running — and leaves
// the intent Running, naming the preparer, not the supervisor; the next
// start settles it and prepares the image, and nothing is left.
func TestSpec35PreparerDiesWithTheSupervisor(t *testing.T) {
	e := needFailpoints(t)
	image, cfg := freshImage(t)
	running := killedPreparation(t, "lazaret-rs:preparer-progress", image, cfg)
	pid := running[0].GetPreparerPid()
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmd), prepared.PreparerArg) {
		t.Fatalf("the preparer (pid %d) outlived its supervisor: %q", pid, cmd)
	}
	var logs strings.Builder
	paths, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		logs.Write(b)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("role=preparer pid=%d ", pid)) {
		t.Errorf("the prepare intent names pid %d, which is not the preparer role's (no such line in any hc.log)", pid)
	}
	if r := lz(t, workspace(t), nil, "run", "--config", cfg, "-p", "fresh", "--", "cat", "/etc/fresh"); r.code != 0 || !strings.HasPrefix(r.stdout, "fresh ") {
		t.Fatalf("run after the killed preparation: %+v", r)
	}
	noLeftovers(t)
	ops, arts := catalogState(t)
	if _, r := opsOf(ops, image); len(r) != 0 || artifactOf(arts, image).GetState() != catalog.Published {
		t.Errorf("after the next start: running %v record %v", r, artifactOf(arts, image))
	}
}

func stagingNames(t *testing.T) []string {
	ents, _ := os.ReadDir(filepath.Join(need(t).stateHome, "lazaret", "prepared", ".staging"))
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

// TestOR7GCCrashRecovery (OR-7): a `lazaret gc` SIGKILLed right after the
// catalog records Reclaiming (before the rename) does not block the image:
// the next run's preparer (RS finds the tree, but the coordinator reads it
// Reclaiming in the catalog) and lease acquisition roll the reclamation back;
// one killed right after the rename is completed by the next gc.
func TestOR7GCCrashRecovery(t *testing.T) {
	e := needFailpoints(t)
	image, cfg := freshImage(t)
	ws := workspace(t)
	run := func() {
		t.Helper()
		if r := lz(t, ws, nil, "run", "--config", cfg, "-p", "fresh", "--", "cat", "/etc/fresh"); r.code != 0 || !strings.HasPrefix(r.stdout, "fresh ") {
			t.Fatalf("run: %+v", r)
		}
		noLeftovers(t)
	}
	run()
	state := func() (catalog.ArtifactState, bool) {
		_, arts := catalogState(t)
		a := artifactOf(arts, image)
		if a == nil {
			return 0, false
		}
		_, err := os.Stat(filepath.Join(e.stateHome, "lazaret", "prepared", a.GetArtifactId()))
		return a.GetState(), err == nil
	}
	// The most recently used artifact is reclaimed first: this image's.
	_, r := gcJSON(t, e.binFP, []string{failpoint.Env + "=gc:reclaiming"}, "--keep", "0", "--min-age", "0")
	if r.code == 0 || !strings.Contains(r.stderr, "failpoint hit: gc:reclaiming") {
		t.Fatalf("gc not killed at gc:reclaiming: %+v", r)
	}
	if st, tree := state(); st != catalog.Reclaiming || !tree {
		t.Fatalf("after a kill at gc:reclaiming: %v, tree present %v", st, tree)
	}
	run() // rolls back, leases, runs
	if st, tree := state(); st != catalog.Published || !tree {
		t.Fatalf("after the recovering run: %v, tree present %v", st, tree)
	}
	// RS found the tree and named it at once (a provisional
	// ArtifactReady), the coordinator's verdict (from the catalog) said it
	// was not Published, so the coordinator did not lease it, and the
	// preparer settled it (then the lease was recorded: the run ran).
	lg := lz(t, ws, nil, "logs", "-p", "fresh")
	if !strings.Contains(lg.stdout, "the Storage Catalog does not record the prepared lower Published; running the preparer") {
		t.Errorf("the recovering run's log does not say the preparer settled the found tree: %+v", lg)
	}
	if !strings.Contains(lg.stdout, "found a prepared lower the Storage Catalog does not record Published for the image: not leasing it") {
		t.Errorf("the recovering run's log does not say the coordinator declined RS's provisional artifact: %+v", lg)
	}
	_, r = gcJSON(t, e.binFP, []string{failpoint.Env + "=gc:renamed"}, "--keep", "0", "--min-age", "0")
	if r.code == 0 || !strings.Contains(r.stderr, "failpoint hit: gc:renamed") {
		t.Fatalf("gc not killed at gc:renamed: %+v", r)
	}
	if st, tree := state(); st != catalog.Reclaiming || tree {
		t.Fatalf("after a kill at gc:renamed: %v, tree present %v", st, tree)
	}
	g, r := gcJSON(t, e.bin, nil, "--dry-run")
	if r.code != 0 || len(g.Recovered) == 0 {
		t.Fatalf("dry run does not report the interrupted reclamation: %+v %+v", g, r)
	}
	g, r = gcJSON(t, e.bin, nil)
	if r.code != 0 || !strings.Contains(strings.Join(g.Recovered, "\n"), "interrupted reclamation completed") {
		t.Fatalf("next gc: %+v %+v", g, r)
	}
	if _, ok := state(); ok {
		t.Fatal("record left after completion")
	}
	run() // prepares again
	if st, tree := state(); st != catalog.Published || !tree {
		t.Fatalf("after re-preparation: %v %v", st, tree)
	}
}
