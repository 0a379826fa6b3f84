package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/imagebuild"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/recipe"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

// recipeBuildProfile names the build Domain's synthetic profile.
const recipeBuildProfile = "recipe-build"

// recipeBase resolves a recipe's base to its OCI layout and tag, and the
// built-in image kind when it is one.
func recipeBase(base, dataHome string) (dir, tag, kind string) {
	if strings.HasPrefix(base, "oci:") {
		dir, tag, _ = strings.Cut(strings.TrimPrefix(base, "oci:"), ":")
		return dir, tag, ""
	}
	return filepath.Join(dataHome, "lazaret", "images", base), imagebuild.DefaultTag, base
}

// recipeRequest is who asks ensureRecipeImage for a profile's image.
type recipeRequest int

const (
	// recipeForRun: a `lazaret run` of the profile, which builds the image
	// on first use.
	recipeForRun recipeRequest = iota
	// recipeForBuild: `lazaret image build PROFILE`.
	recipeForBuild
	// recipeForForcedBuild: `lazaret image build --force PROFILE`, which
	// rebuilds a current image too.
	recipeForForcedBuild
)

// recipeBuildNotice is the line ensureRecipeImage prints before it builds
// profile's image for req: built is whether an image of the recipe was
// built before, current whether it is current.
func recipeBuildNotice(profile string, req recipeRequest, built, current bool) string {
	switch {
	case current:
		return fmt.Sprintf("lazaret: rebuilding the image of profile %s from its recipe (--force)", profile)
	case built:
		return fmt.Sprintf("lazaret: the base image of profile %s changed since its image was built: rebuilding it from its recipe", profile)
	case req == recipeForRun:
		return fmt.Sprintf("lazaret: the image of profile %s is not built yet: building it from its recipe (once; later runs reuse it)", profile)
	}
	return fmt.Sprintf("lazaret: building the image of profile %s from its recipe", profile)
}

// ensureRecipeImage builds prof's recipe image unless it is current (or
// always for a forced build). It reports whether it built.
func ensureRecipeImage(ctx context.Context, prof profile, out io.Writer, req recipeRequest) (built bool, err error) {
	force := req == recipeForForcedBuild
	r := prof.Config.Recipe
	data, err := config.DataHome(os.Getenv)
	if err != nil {
		return false, err
	}
	layout := r.Layout(data)
	defer func() {
		// The stamp keeps the image from `lazaret gc` for --min-age.
		if err == nil {
			if serr := recipe.MarkUsed(layout, time.Now()); serr != nil {
				fmt.Fprintf(out, "lazaret: warning: cannot record the use of %s (lazaret gc may reclaim it): %v\n", layout, serr)
			}
		}
	}()
	baseDir, baseTag, kind := recipeBase(r.Base, data)
	if kind != "" {
		if _, err := os.Stat(filepath.Join(baseDir, "index.json")); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(out, "lazaret: the base image %s of profile %s's recipe is not built yet: building it first\n", kind, prof.Name)
			exe, err := os.Executable()
			if err != nil {
				return false, err
			}
			broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), exe)
			if err != nil {
				return false, err
			}
			if _, err := imagebuild.Build(ctx, imagebuild.Options{Kind: kind, Dest: baseDir, Progress: out, Broker: broker}); err != nil {
				return false, fmt.Errorf("build the base image %s: %w", kind, err)
			}
		}
	}
	base, err := imagebuild.ReadImage(baseDir, baseTag)
	if err != nil {
		return false, errdefs.Mark(fmt.Errorf("the base image %s of profile %s's recipe: %w", r.Base, prof.Name, err), errdefs.ErrInvalid)
	}
	current := func() (bool, *recipe.Record, error) {
		return recipe.Current(layout, r, base.ManifestDigest.String())
	}
	if ok, _, err := current(); err != nil || ok && !force {
		return false, err
	}
	lock, err := recipe.Lock(ctx, layout)
	if err != nil {
		return false, err
	}
	defer lock.Close()
	ok, rec, err := current()
	if err != nil || ok && !force {
		return false, err // another lazaret built it meanwhile
	}
	fmt.Fprintln(out, recipeBuildNotice(prof.Name, req, rec != nil, ok))
	sb, err := newRecipeSandbox(prof)
	if err != nil {
		return false, err
	}
	b := &recipe.Build{Profile: prof.Name, Recipe: r, Base: baseDir, BaseTag: baseTag, BaseManifest: base.ManifestDigest.String(),
		Layout: layout, Sandbox: sb, Out: out, Now: time.Now}
	if _, err := b.Run(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// recipeSandbox is a recipe build's Domain (recipe.Sandbox), driven by
// child `lazaret run` sessions of this executable with a synthetic
// configuration: a holder session keeps the Domain up, each step joins it.
type recipeSandbox struct {
	exe, rsPath string
	broker      *proc.Broker
	env         []string
	dir         string // private temporary directory: ws/ and config.toml
	ws, cfg     string
	paths       domain.Paths
	holder      *proc.Child
	holderIn    *os.File
	holderOut   *tailBuffer
	lock        *os.File
}

func newRecipeSandbox(prof profile) (*recipeSandbox, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	rsPath, err := locate.Find(locate.RS, programGetenv(prof.Programs, os.Getenv))
	if err != nil {
		return nil, err
	}
	broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), exe)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lazaret-recipe-")
	if err != nil {
		return nil, err
	}
	s := &recipeSandbox{exe: exe, rsPath: rsPath, broker: broker, env: os.Environ(), dir: dir,
		ws: filepath.Join(dir, "workspace"), cfg: filepath.Join(dir, "config.toml")}
	fail := func(err error) (*recipeSandbox, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.Mkdir(s.ws, 0o700); err != nil {
		return fail(err)
	}
	doc, err := recipeBuildConfig(prof)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(s.cfg, doc, 0o600); err != nil {
		return fail(err)
	}
	ws, err := domain.ResolveWorkspace(s.ws, os.Getenv("HOME"))
	if err != nil {
		return fail(err)
	}
	s.ws = ws.Root
	roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
	if err != nil {
		return fail(err)
	}
	if s.paths, err = domain.PathsFor(roots, domain.DeriveID(recipeBuildProfile, ws.Root)); err != nil {
		return fail(err)
	}
	return s, nil
}

// recipeBuildConfig is the build Domain's configuration: the recipe's base
// as image, the default State Anchors, the profile's network and
// environment, root sessions, the host's CA bundle, and [programs].
func recipeBuildConfig(prof profile) ([]byte, error) {
	p := prof.Config
	env := map[string]any{}
	for k, v := range p.Env {
		env[k] = v
	}
	net := map[string]any{}
	var allow, deny, dns []string
	for _, pf := range p.Network.Allow {
		allow = append(allow, pf.String())
	}
	for _, pf := range p.Network.Deny {
		deny = append(deny, pf.String())
	}
	for _, a := range p.Network.DNS {
		dns = append(dns, a.String())
	}
	for k, v := range map[string][]string{"allow": allow, "deny": deny, "dns": dns, "allow_hosts": p.Network.AllowHosts} {
		if len(v) > 0 {
			net[k] = v
		}
	}
	// host_ca: downloads through a TLS-inspecting proxy need the CAs the
	// host trusts.
	bp := map[string]any{"image": p.Recipe.Base, "description": "recipe build of profile " + prof.Name, "network": net, "host_ca": true}
	bp["env"] = env
	doc := map[string]any{"profiles": map[string]any{recipeBuildProfile: bp}}
	if len(prof.Programs) > 0 {
		doc["programs"] = prof.Programs
	}
	return toml.Marshal(doc)
}

// runArgs is `lazaret run` of the build Domain with argv.
func (s *recipeSandbox) runArgs(argv ...string) []string {
	return append([]string{s.exe, "run", "--config", s.cfg, "-p", recipeBuildProfile, "-C", s.ws, "-T", "--"}, argv...)
}

const recipeReadyLine = "lazaret-recipe-build-ready"

func (s *recipeSandbox) Start(ctx context.Context) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	child, err := s.broker.Start("recipe_holder", proc.Command{Path: s.exe, Args: s.runArgs("sh", "-c", "echo "+recipeReadyLine+"; exec cat >/dev/null"),
		Env: s.env, Dir: s.ws, Files: []*os.File{inR, outW, outW}})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return err
	}
	s.holder, s.holderIn, s.holderOut = child, inW, &tailBuffer{max: 16 << 10}
	ready := make(chan bool, 1)
	go func() {
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		sent := false
		for sc.Scan() {
			if !sent && sc.Text() == recipeReadyLine {
				ready <- true
				sent = true
				continue
			}
			s.holderOut.Write(append(sc.Bytes(), '\n'))
		}
		if !sent {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if ok {
			return nil
		}
		child.Wait(ctx)
		return errdefs.New(errdefs.ErrUnavailable, "the build sandbox did not start: %s", strings.TrimSpace(s.holderOut.String()))
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *recipeSandbox) Run(ctx context.Context, step string, out io.Writer) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	child, err := s.broker.Start("recipe_step", proc.Command{Path: s.exe, Args: s.runArgs("sh", "-c", step), Env: s.env, Dir: s.ws, Files: []*os.File{nil, w, w}})
	w.Close()
	if err != nil {
		r.Close()
		return 0, err
	}
	_, cerr := io.Copy(out, r)
	r.Close()
	st, err := child.Wait(ctx)
	if err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return st.ShellCode(), nil
}

func (s *recipeSandbox) Received(ctx context.Context) int64 {
	out, _, st, err := s.broker.Output(ctx, "recipe_netdev", proc.Command{Path: s.exe, Args: s.runArgs("cat", "/proc/net/dev"), Env: s.env, Dir: s.ws}, 64<<10)
	if err != nil || st.ShellCode() != 0 {
		return 0
	}
	return receivedBytes(string(out))
}

// receivedBytes sums the received bytes of every interface but loopback
// in a /proc/net/dev table.
func receivedBytes(table string) int64 {
	var n int64
	for _, line := range strings.Split(table, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		if f := strings.Fields(rest); len(f) > 0 {
			if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				n += v
			}
		}
	}
	return n
}

func (s *recipeSandbox) Stop(ctx context.Context) error {
	if err := s.endHolder(ctx); err != nil {
		return err
	}
	lock, err := os.OpenFile(s.paths.LockFile(), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open the build Domain's lock: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			lock.Close()
			return errdefs.New(errdefs.ErrUnavailable, "the build Domain %s did not stop (%v); see %s", s.paths.ID, err, s.paths.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.lock = lock
	used, err := anchor.InUse(s.paths.DomainRoot)
	if err != nil {
		return err
	}
	if len(used) > 0 {
		return errdefs.New(errdefs.ErrUnavailable, "the build Domain's State Anchors are still mounted (%s)", strings.Join(used, "; "))
	}
	return nil
}

// endHolder ends the holder session (its stdin closes; the Domain stops
// when it was the last session) and waits for its CLI.
func (s *recipeSandbox) endHolder(ctx context.Context) error {
	if s.holder == nil {
		return nil
	}
	s.holderIn.Close()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := s.holder.Wait(wctx)
	if err != nil {
		s.holder.Signal(unix.SIGTERM)
		st, err = s.holder.Wait(ctx)
	}
	s.holder = nil
	if err != nil {
		return err
	}
	if st.ShellCode() != 0 {
		return errdefs.New(errdefs.ErrUnavailable, "the build sandbox's holder session ended with %s: %s", st, strings.TrimSpace(s.holderOut.String()))
	}
	return nil
}

func (s *recipeSandbox) Export(ctx context.Context, w io.Writer) (anchor.LayerStats, error) {
	return statemaint.ExportLayer(ctx, s.rsPath, s.paths.DomainRoot, w)
}

func (s *recipeSandbox) Remove(ctx context.Context) error {
	defer os.RemoveAll(s.dir)
	herr := s.endHolder(ctx)
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
	if _, err := os.Lstat(s.paths.DomainRoot); errors.Is(err, fs.ErrNotExist) {
		return herr
	}
	out, stderr, st, err := s.broker.Output(ctx, "recipe_rm", proc.Command{Path: s.exe, Args: []string{s.exe, "rm", "-p", recipeBuildProfile, "-C", s.ws, "--yes"}, Env: s.env, Dir: s.ws}, 64<<10)
	if err != nil {
		return err
	}
	if st.ShellCode() != 0 {
		return errdefs.New(errdefs.ErrUnavailable, "lazaret rm of the build Domain %s failed (%s): %s", s.paths.ID, st, strings.TrimSpace(string(out)+string(stderr)))
	}
	return herr
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
