//go:build lazaret_bench

package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// npmBenchPackages and npmBenchFiles shape the generated registry: every
// package has npmBenchFiles files and depends on two others, so that one
// install of the project resolves and extracts all of them.
const (
	npmBenchPackages = 120
	npmBenchFiles    = 25
)

func npmPkgName(i int) string { return fmt.Sprintf("lzb-pkg-%03d", i) }

// npmRegistry writes a static npm registry into dir: a packument at
// /<name> and a tarball at /tarballs/<name>-1.0.0.tgz for each package,
// the tarball URLs pointing at base.
func npmRegistry(t *testing.T, dir, base string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "tarballs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < npmBenchPackages; i++ {
		name := npmPkgName(i)
		deps := map[string]string{}
		for _, d := range []int{2*i + 1, 2*i + 2} {
			if d < npmBenchPackages {
				deps[npmPkgName(d)] = "^1.0.0"
			}
		}
		manifest := map[string]any{"name": name, "version": "1.0.0", "main": "index.js", "license": "MIT", "dependencies": deps}
		mjs, _ := json.MarshalIndent(manifest, "", "  ")
		var tgz bytes.Buffer
		gz := gzip.NewWriter(&tgz)
		tw := tar.NewWriter(gz)
		add := func(p string, b []byte) {
			tw.WriteHeader(&tar.Header{Name: "package/" + p, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg})
			tw.Write(b)
		}
		add("package.json", mjs)
		add("index.js", []byte(fmt.Sprintf("module.exports = require('./lib/f00.js');\n")))
		add("README.md", []byte("# "+name+"\n"))
		for f := 0; f < npmBenchFiles-3; f++ {
			add(fmt.Sprintf("lib/f%02d.js", f), []byte(fmt.Sprintf("// %s file %d\nmodule.exports = function f%d(x) { return x + %d; };\n%s\n", name, f, f, f, strings.Repeat("// padding\n", 20))))
		}
		tw.Close()
		gz.Close()
		sum1 := sha1.Sum(tgz.Bytes())
		sum512 := sha512.Sum512(tgz.Bytes())
		file := name + "-1.0.0.tgz"
		if err := os.WriteFile(filepath.Join(dir, "tarballs", file), tgz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		version := map[string]any{"name": name, "version": "1.0.0", "main": "index.js", "license": "MIT", "dependencies": deps,
			"dist": map[string]any{"tarball": base + "tarballs/" + file, "shasum": hex.EncodeToString(sum1[:]), "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum512[:])}}
		packument := map[string]any{"name": name, "dist-tags": map[string]string{"latest": "1.0.0"}, "versions": map[string]any{"1.0.0": version}}
		pjs, _ := json.Marshal(packument)
		if err := os.WriteFile(filepath.Join(dir, name), pjs, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// npmProject is the package.json of the installed project: the root of
// the dependency tree plus a few direct dependencies.
func npmProject() string {
	deps := map[string]string{npmPkgName(0): "^1.0.0"}
	for i := 10; i < npmBenchPackages; i += 10 {
		deps[npmPkgName(i)] = "^1.0.0"
	}
	b, _ := json.MarshalIndent(map[string]any{"name": "lzb-project", "version": "1.0.0", "private": true, "dependencies": deps}, "", "  ")
	return string(b) + "\n"
}

// TestBenchNpmInstall (spec §3.4, SR-13): a real `npm install` of a
// project with 120 packages (25 files each) from a registry the bench
// serves on a test host, inside the node profile's sandbox as its agent
// user: into the workspace, whose node_modules is an ignored directory
// bound from Ignored Workspace State, and into the same project on a plain
// bind (a configured volume) of the same sandbox, and through the
// Git-routing daemon (a node_modules created during the generation). Target: workspace ≤ 1.5×
// plain bind. Each install has a fresh npm cache, so both fetch every
// package.
func TestBenchNpmInstall(t *testing.T) {
	e := need(t)
	n := *flagRuns
	if n > 5 {
		n = 5
	}
	if _, err := os.Stat(filepath.Join(e.home, ".local/share/lazaret/images")); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("198.18.%d.2", 10+int(time.Now().UnixNano()%200))
	base := "http://" + addr + ":8080/"
	reg := e.userDir("npm-registry-" + randHex(3))
	npmRegistry(t, reg, base)
	serveOnTestHost(t, []string{addr}, httpServerEnv, addr+":8080;"+reg, func(string) {})

	// The workspace: one project per run (p1..pN), node_modules ignored
	// at every depth; the first generation creates their (empty)
	// node_modules through the router, so the measured generation binds
	// each from its Ignored Workspace State copy. The projects r1..rN have
	// no node_modules at generation start: the router serves what npm
	// creates there (for comparison).
	ws := workspace(t)
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "node_modules/\n")
	vol := e.userDir("npm-volume-" + randHex(3))
	for i := 1; i <= n; i++ {
		writeAs(t, e, filepath.Join(ws, fmt.Sprintf("p%d", i), "package.json"), npmProject())
		writeAs(t, e, filepath.Join(ws, fmt.Sprintf("r%d", i), "package.json"), npmProject())
		p := filepath.Join(vol, fmt.Sprintf("p%d", i))
		writeAs(t, e, filepath.Join(p, "package.json"), npmProject())
	}
	git("add", "-A")
	git("commit", "-qm", "projects")
	// The agent (guest uid 1000, a subordinate id on the host) owns the
	// volume, as it owns its bound node_modules.
	filepath.Walk(vol, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Lchown(p, e.subStart+999, e.subStart+999)
		}
		return nil
	})
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	doc := fmt.Sprintf("[[profiles.node.volumes]]\nsource = %q\ntarget = \"/vol\"\nmode = \"rw\"\n", vol)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)
	prep := "cd /workspace && for i in $(seq " + fmt.Sprint(n) + "); do mkdir -p p$i/node_modules; done && echo ok"
	if r := lzFor(t, 10*time.Minute, ws, nil, nil, "run", "--config", cfg, "-p", "node", "--", "sh", "-c", prep); r.code != 0 {
		t.Fatalf("prepare node_modules: %+v", r)
	}
	noLeftovers(t)
	script := fmt.Sprintf(`set -e
t() { s=$(date +%%s%%N); "$@" >/dev/null 2>&1 || { echo "FAILED $*" >&2; "$@" >&2; exit 1; }; e=$(date +%%s%%N); echo $(( (e - s) / 1000 )); }
inst() { cd "$1" && npm install --no-audit --no-fund --no-update-notifier --loglevel=error --registry=%[1]s --cache=/tmp/npm-cache-$2; }
grep -q ' /workspace/p1/node_modules ' /proc/self/mounts && echo BOUND
for i in $(seq %[2]d); do
  echo "bind_ignored $(t inst /workspace/p$i ws$i)"
  echo "plain_bind $(t inst /vol/p$i vol$i)"
  echo "router $(t inst /workspace/r$i r$i)"
done
ls /workspace/p1/node_modules | wc -l | sed 's/^/PACKAGES=/'`, base, n)
	r := lzFor(t, 30*time.Minute, ws, nil, nil, "run", "--config", cfg, "-p", "node", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("npm install: %+v", r)
	}
	times := parseTimes(t, r.stdout)
	if len(times["bind_ignored"]) != n || len(times["plain_bind"]) != n || len(times["router"]) != n || !strings.Contains(r.stdout, "BOUND") || !strings.Contains(r.stdout, fmt.Sprintf("PACKAGES=%d", npmBenchPackages)) {
		t.Fatalf("npm install output: %s\n%s", r.stdout, r.stderr)
	}
	noLeftovers(t)
	for _, p := range []string{"p1/node_modules", "r1/node_modules", "node_modules"} {
		if ents, err := os.ReadDir(filepath.Join(ws, p)); err == nil && len(ents) > 0 {
			t.Errorf("npm install wrote into the host workspace's %s", p)
		}
	}
	b, w, rt := median(times["plain_bind"]), median(times["bind_ignored"]), median(times["router"])
	fmt.Printf("\nnpm install of %d packages (%d files), as the node profile's agent user (median ms of %d):\n", npmBenchPackages, npmBenchPackages*npmBenchFiles, n)
	fmt.Printf("%-44s %10.1f\n%-44s %10.1f\n%-44s %10.1f\n", "plain bind (configured volume)", b, "workspace, node_modules bound from state", w, "workspace, node_modules through the router", rt)
	fmt.Printf("npm install into the workspace / plain bind: %.2fx (target <= 1.5x); through the router %.2fx\n", w/b, rt/b)
	recordBench(t, "npm_install", "ms", map[string]any{"results": times, "packages": npmBenchPackages, "files": npmBenchPackages * npmBenchFiles, "ratio": w / b, "router_ratio": rt / b})
}
