package integration

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/config"
	"time"
)

// recipe tests build images into the test user's image store; each uses a
// fresh marker so that its recipe (and so its image) is its own, and
// removes what it built.

var builtLine = regexp.MustCompile(`image (recipe-[0-9a-f]{20}) (built|is current)`)

// recipeConfig writes a configuration with profile NAME built from base
// with steps.
func recipeConfig(t *testing.T, name, base string, steps ...string) string {
	t.Helper()
	e := need(t)
	var b strings.Builder
	b.WriteString("[profiles." + name + "]\ncommand = [\"cat\", \"/opt/recipe/a\"]\n[profiles." + name + ".recipe]\nbase = \"" + base + "\"\nrun = [")
	for i, s := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'''" + s + "'''")
	}
	b.WriteString("]\n")
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// storeImage returns the recipe image directory an image build reported.
func storeImage(t *testing.T, r result) string {
	t.Helper()
	m := builtLine.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("image build printed no image: %q (stderr %q)", r.stdout, r.stderr)
	}
	return filepath.Join(need(t).home, ".local/share/lazaret/images", m[1])
}

// buildDomains lists the Domain Roots of recipe builds left behind.
func buildDomains(t *testing.T) []string {
	t.Helper()
	e := need(t)
	var left []string
	ds, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret/domains/*/domain.json"))
	for _, d := range ds {
		if b, _ := os.ReadFile(d); strings.Contains(string(b), `"recipe-build"`) {
			left = append(left, filepath.Dir(d))
		}
	}
	return left
}

// TestSpec35RecipeBuildReuseRebuild: a two-step recipe builds with each
// step's output, commits additions and a deletion of a base file, a second
// workspace reuses it without a step running, an explicit build says it is
// current, and a changed step rebuilds it.
func TestSpec35RecipeBuildReuseRebuild(t *testing.T) {
	need(t)
	marker := randHex(6)
	steps := []string{
		"mkdir -p /opt/recipe && echo " + marker + " > /opt/recipe/a && echo first-step-output",
		"echo two > /opt/recipe/b && rm /etc/group && echo second-step-output >&2",
	}
	cfg := recipeConfig(t, "rcp", "busybox", steps...)
	ws1, ws2 := workspace(t), workspace(t)
	start := time.Now()
	r := lzFor(t, 10*time.Minute, ws1, nil, nil, "image", "build", "--config", cfg, "rcp")
	buildTime := time.Since(start)
	if r.code != 0 {
		t.Fatalf("image build: %d\n%s", r.code, r.stderr)
	}
	img := storeImage(t, r)
	t.Cleanup(func() { os.RemoveAll(img) })
	if strings.Contains(r.stderr, "not built yet") {
		t.Errorf("image build speaks as a run that found the image missing:\n%s", r.stderr)
	}
	for _, want := range []string{"lazaret: building the image of profile rcp from its recipe\n", "[1/2] mkdir -p /opt/recipe", "  | first-step-output", "[2/2] done in", "  | second-step-output", "downloaded", "built the image of profile rcp"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("build progress lacks %q:\n%s", want, r.stderr)
		}
	}
	t.Logf("recipe build took %s", buildTime)
	if left := buildDomains(t); len(left) > 0 {
		t.Errorf("build Domain state left: %v", left)
	}
	noLeftovers(t)

	// First use in another workspace: no step runs; the command is the
	// profile's; the deletion is in the image.
	start = time.Now()
	r = lz(t, ws2, nil, "run", "--config", cfg, "-p", "rcp")
	reuse := time.Since(start)
	if r.code != 0 || strings.TrimSpace(r.stdout) != marker || strings.Contains(r.stderr, "[1/2]") || strings.Contains(r.stderr, "building") {
		t.Fatalf("reuse: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("cold start reusing the recipe image took %s", reuse)
	r = lz(t, ws2, nil, "run", "--config", cfg, "-p", "rcp", "--", "sh", "-c", "cat /opt/recipe/b; test -e /etc/group && echo group-present || echo group-deleted; test -e /etc/passwd && echo passwd-kept")
	if r.code != 0 || r.stdout != "two\ngroup-deleted\npasswd-kept\n" {
		t.Fatalf("layer content: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws1, nil, "image", "build", "--config", cfg, "rcp")
	if r.code != 0 || !strings.Contains(r.stdout, "is current") || strings.Contains(r.stderr, "[1/2]") {
		t.Fatalf("second build: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	r = lzFor(t, 10*time.Minute, ws1, nil, nil, "image", "build", "--force", "--config", cfg, "rcp")
	if r.code != 0 || !strings.Contains(r.stderr, "rebuilding the image of profile rcp from its recipe (--force)") || !strings.Contains(r.stderr, "[2/2]") {
		t.Fatalf("forced build: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)

	// A changed step is a new recipe: lazaret run rebuilds, saying so.
	cfg2 := recipeConfig(t, "rcp", "busybox", steps[0], "echo changed > /opt/recipe/b")
	r = lzFor(t, 10*time.Minute, ws2, nil, nil, "run", "--config", cfg2, "-p", "rcp", "--", "cat", "/opt/recipe/b")
	if r.code != 0 || r.stdout != "changed\n" || !strings.Contains(r.stderr, "not built yet: building it from its recipe") || !strings.Contains(r.stderr, "[2/2] echo changed") {
		t.Fatalf("rebuild: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	r = lz(t, ws2, nil, "image", "build", "--config", cfg2, "rcp")
	img2 := storeImage(t, r)
	t.Cleanup(func() { os.RemoveAll(img2) })
	if img2 == img {
		t.Fatal("changed step, same image")
	}
	if _, err := os.Stat(filepath.Join(img, "index.json")); err != nil {
		t.Errorf("the first image is gone: %v", err)
	}
	if left := buildDomains(t); len(left) > 0 {
		t.Errorf("build Domain state left: %v", left)
	}
	noLeftovers(t)

	// gc reclaims the superseded recipe image, which no profile of the
	// configuration uses, and keeps the current one and the base images.
	r = lz(t, ws2, nil, "gc", "--config", cfg2, "--min-age", "0", "--json")
	if r.code != 0 {
		t.Fatalf("gc: %d\n%s", r.code, r.stderr)
	}
	var res struct {
		RecipeImages []struct{ Name, Action, Reason string } `json:"recipe_images"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("gc --json: %v\n%s", err, r.stdout)
	}
	actions := map[string]string{}
	for _, e := range res.RecipeImages {
		actions[e.Name] = e.Action + ": " + e.Reason
	}
	if a := actions[filepath.Base(img)]; !strings.HasPrefix(a, "reclaimed") {
		t.Errorf("the superseded image %s: %q, want reclaimed (%v)", filepath.Base(img), a, actions)
	}
	if a := actions[filepath.Base(img2)]; a != "keep: profile rcp uses it" {
		t.Errorf("the current image %s: %q, want kept for profile rcp (%v)", filepath.Base(img2), a, actions)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("the superseded image is still there: %v", err)
	}
	for _, keep := range []string{img2, filepath.Join(filepath.Dir(img), "busybox")} {
		if _, err := os.Stat(filepath.Join(keep, "index.json")); err != nil {
			t.Errorf("gc removed %s: %v", keep, err)
		}
	}
	r = lz(t, ws2, nil, "run", "--config", cfg2, "-p", "rcp", "--", "cat", "/opt/recipe/b")
	if r.code != 0 || r.stdout != "changed\n" || strings.Contains(r.stderr, "building") {
		t.Fatalf("run after gc: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)
}

// TestSpec35RecipeFailedStepLeavesNothing: a failing step prints its
// output and status, and leaves no image and no build Domain state.
func TestSpec35RecipeFailedStepLeavesNothing(t *testing.T) {
	marker := randHex(6)
	cfg := recipeConfig(t, "bad", "busybox", "mkdir -p /opt/recipe && echo ok", "echo failing-"+marker+"; exit 7", "echo never-runs")
	ws := workspace(t)
	r := lzFor(t, 10*time.Minute, ws, nil, nil, "run", "--config", cfg, "-p", "bad", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "  | failing-"+marker) || !strings.Contains(r.stderr, "recipe step 2/3 failed with exit status 7") || strings.Contains(r.stderr, "never-runs\n") {
		t.Fatalf("failed build: %d\n%s", r.code, r.stderr)
	}
	ents, _ := filepath.Glob(filepath.Join(need(t).home, ".local/share/lazaret/images/.recipe-*staging*"))
	if len(ents) > 0 {
		t.Errorf("staging left: %v", ents)
	}
	r = lz(t, ws, nil, "profile", "list", "--config", cfg)
	if !strings.Contains(r.stdout, "recipe: busybox + 3 steps") {
		t.Errorf("profile list: %s", r.stdout)
	}
	// image build names the image it would publish: it is absent.
	firstErr := r.stderr
	r = lzFor(t, 10*time.Minute, ws, nil, nil, "image", "build", "--config", cfg, "bad")
	if r.code != 125 {
		t.Fatalf("second failing build: %d", r.code)
	}
	imgs, _ := filepath.Glob(filepath.Join(need(t).home, ".local/share/lazaret/images/recipe-*"))
	for _, d := range imgs {
		if b, err := os.ReadFile(filepath.Join(d, "lazaret-recipe.json")); err == nil && strings.Contains(string(b), marker) {
			t.Errorf("image of the failed recipe published: %s", d)
		}
	}
	if left := buildDomains(t); len(left) > 0 {
		t.Errorf("build Domain state left: %v\nfirst build:\n%s\nsecond build:\n%s", left, firstErr, r.stderr)
	}
	noLeftovers(t)
}

// TestSpec35AgentProfiles: the built-in node, claude and codex profiles
// run their tools (images built by the set-up, `scripts/setup.sh images
// USER node claude codex`, else here, from the npm registry), in a second
// workspace without rebuilding, as the agent user.
func TestSpec35AgentProfiles(t *testing.T) {
	parallel(t)
	// The agent profiles trust what the host trusts (host_ca): the host's
	// bundle, read-only, named by the TLS clients' variables.
	bundle := config.HostCABundle(func(string) string { return "" })
	caBytes, err := os.ReadFile(bundle)
	if bundle == "" || err != nil {
		t.Fatalf("this host has no CA bundle (%q, %v): install ca-certificates (apt-get install ca-certificates)", bundle, err)
	}
	caSum := fmt.Sprintf("%x", sha256.Sum256(caBytes))
	for _, c := range []struct{ profile, cmd, want string }{
		{"node", "node --version", "v22."},
		{"claude", "claude --version", "Claude Code"},
		{"codex", "codex --version", "codex"},
	} {
		t.Run(c.profile, func(t *testing.T) {
			parallel(t)
			ws := workspace(t)
			r := lzFor(t, 20*time.Minute, ws, nil, nil, append([]string{"run", "-p", c.profile, "--"}, strings.Fields(c.cmd)...)...)
			if r.code != 0 || !strings.Contains(r.stdout, c.want) {
				t.Fatalf("%s: %d %q\n%s", c.cmd, r.code, r.stdout, r.stderr)
			}
			ws2 := workspace(t)
			start := time.Now()
			r = lzFor(t, 5*time.Minute, ws2, nil, nil, "run", "-p", c.profile, "--", "sh", "-c",
				"id -un; echo $PATH; sha256sum \"$NODE_EXTRA_CA_CERTS\" | cut -d' ' -f1; echo \"$SSL_CERT_FILE $GIT_SSL_CAINFO\"; touch \"$SSL_CERT_FILE\" 2>/dev/null && echo ca-writable; "+c.cmd)
			if r.code != 0 || !strings.Contains(r.stdout, c.want) || strings.Contains(r.stderr, "building") {
				t.Fatalf("second workspace: %d %q\n%s", r.code, r.stdout, r.stderr)
			}
			lines := strings.Split(r.stdout, "\n")
			if lines[0] != "agent" || !strings.HasSuffix(lines[1], ":/.lazaret/bin") {
				t.Errorf("user and PATH: %q", r.stdout)
			}
			if len(lines) < 4 || lines[2] != caSum || lines[3] != config.HostCAGuestPath+" "+config.HostCAGuestPath || strings.Contains(r.stdout, "ca-writable") {
				t.Errorf("host CA bundle (sha256 %s of %s) not given read-only through the TLS variables: %q", caSum, bundle, r.stdout)
			}
			t.Logf("%s in a second workspace (cold start, image reused): %s", c.cmd, time.Since(start))
			noLeftovers(t)
		})
	}
	r := lz(t, workspace(t), nil, "alias", "--shell", "bash")
	if !strings.Contains(r.stdout, "claude() {") || !strings.Contains(r.stdout, "--profile claude -- claude \"$@\"") || !strings.Contains(r.stdout, "--profile codex -- codex \"$@\"") {
		t.Errorf("alias: %s", r.stdout)
	}
}
