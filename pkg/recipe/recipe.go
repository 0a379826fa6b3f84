// Package recipe builds a profile's image from its recipe (config.Recipe)
// and keeps the record that says whether a built image is current.
//
// A build is an ordinary Lazaret Domain (the Sandbox the caller provides:
// the base image, the default State Anchors, the profile's network, an
// empty private workspace): each step runs in it as one session (`sh -c
// STEP` as guest root) with its output streamed under a step header, its
// elapsed time and the bytes the sandbox received; after the last step the
// Domain stops and what the steps changed under the State Anchors is
// exported as one OCI layer (anchor.ExportLayer, in the developer's user
// namespace) and published with the base's layers as the OCI layout of the
// image store (imagebuild.AppendLayer), with Record beside its index.json.
// Changes outside the anchored paths (/tmp, /var/cache, …) are not
// committed. A failed step, or any other failure, publishes nothing: the
// layout appears by one rename at the end. The build Domain's state is
// removed in every case.
//
// A built image is current while its Record names the same recipe digest
// (base reference, steps, config.RecipeFormat) and the same base manifest
// digest; anything else rebuilds it. Builds of one recipe are serialised by
// a lock file beside the store.
package recipe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/imagebuild"
)

// RecordFile is the record's name in the recipe image's layout.
const RecordFile = "lazaret-recipe.json"

// RecordVersion is the version of Record; a newer one is refused.
const RecordVersion = 1

// Record describes how a recipe image was built.
type Record struct {
	Version int `json:"version"`
	// Digest is the recipe's digest (config.RecipeDigest).
	Digest string `json:"digest"`
	// Format is the config.RecipeFormat the image was built with.
	Format int `json:"format"`
	// Base is the base reference and BaseManifest its manifest digest.
	Base         string   `json:"base"`
	BaseManifest string   `json:"base_manifest"`
	Steps        []string `json:"steps"`
	// Built is when the build finished; Seconds how long it took.
	Built   time.Time         `json:"built"`
	Seconds float64           `json:"seconds"`
	Layer   anchor.LayerStats `json:"layer"`
	// Downloaded is the bytes the build sandbox received.
	Downloaded int64 `json:"downloaded"`
}

// ReadRecord reads the record of the layout; a missing one is fs.ErrNotExist.
func ReadRecord(layout string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(layout, RecordFile))
	if err != nil {
		return nil, err
	}
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Version == nil || *v.Version < 1 {
		return nil, errdefs.New(errdefs.ErrCorrupt, "%s: malformed or unversioned recipe record", filepath.Join(layout, RecordFile))
	}
	if *v.Version > RecordVersion {
		return nil, errdefs.New(errdefs.ErrRefused, "%s has version %d, this Lazaret reads up to %d: upgrade Lazaret, or remove the image directory to rebuild it", filepath.Join(layout, RecordFile), *v.Version, RecordVersion)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("%s: %w", filepath.Join(layout, RecordFile), err), errdefs.ErrCorrupt)
	}
	return &r, nil
}

// Current reports whether the image at layout was built from r over the
// base whose manifest digest is baseManifest, and returns its record when
// there is one. A record that cannot be read counts as not current (the
// build replaces it), except a newer version, which is refused.
func Current(layout string, r *config.Recipe, baseManifest string) (bool, *Record, error) {
	rec, err := ReadRecord(layout)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errdefs.ErrCorrupt):
		return false, nil, nil
	case err != nil:
		return false, nil, err
	}
	if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
		return false, rec, nil
	}
	return rec.Digest == r.Digest && rec.Format == config.RecipeFormat && rec.BaseManifest == baseManifest, rec, nil
}

// Lock takes the build lock of the recipe image at layout (a file in
// .locks beside it), waiting while another build holds it; Close releases
// it.
func Lock(ctx context.Context, layout string) (*os.File, error) {
	for {
		f, held, err := tryLock(layout)
		if err != nil || !held {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Sandbox is the build Domain a Build runs its steps in.
type Sandbox interface {
	// Start starts the Domain (base image, default State Anchors).
	Start(ctx context.Context) error
	// Run runs step as `sh -c STEP` as guest root, its stdout and stderr
	// to out, and returns its exit status.
	Run(ctx context.Context, step string, out io.Writer) (int, error)
	// Received is the bytes the sandbox's network interface received so
	// far (0 when unknown).
	Received(ctx context.Context) int64
	// Stop ends the Domain and waits until its State Anchors are no
	// longer mounted, holding its lock until Remove.
	Stop(ctx context.Context) error
	// Export writes the State Anchors' changes as one layer tar to w.
	Export(ctx context.Context, w io.Writer) (anchor.LayerStats, error)
	// Remove stops the Domain if needed and deletes its state.
	Remove(ctx context.Context) error
}

// StepError is a recipe step that exited non-zero. It is
// errdefs.ErrRefused.
type StepError struct {
	Index, Count int
	Step         string
	Code         int
	Elapsed      time.Duration
}

func (e *StepError) Error() string {
	return fmt.Sprintf("recipe step %d/%d failed with exit status %d after %s (its output is above): %s; no image was built, fix the step in the configuration and run again", e.Index, e.Count, e.Code, e.Elapsed.Round(100*time.Millisecond), oneLine(e.Step))
}

// Is makes a StepError errdefs.ErrRefused.
func (e *StepError) Is(target error) bool { return target == errdefs.ErrRefused }

// Build is one recipe build.
type Build struct {
	// Profile names the profile in messages.
	Profile string
	Recipe  *config.Recipe
	// Base and BaseTag are the base image's OCI layout and tag, and
	// BaseManifest its manifest digest.
	Base, BaseTag, BaseManifest string
	// Layout is the image's layout in the store (config.Recipe.Layout).
	Layout string
	// Sandbox runs the steps.
	Sandbox Sandbox
	// Out receives the progress and the steps' output.
	Out io.Writer
	Now func() time.Time
}

// Run builds and publishes the image and returns its record.
func (b *Build) Run(ctx context.Context) (rec *Record, err error) {
	start := b.Now()
	n := len(b.Recipe.Run)
	fmt.Fprintf(b.Out, "lazaret: building the image of profile %s: %s\n", b.Profile, b.Recipe.Summary())
	defer func() {
		// The image (when built) is complete without it: a failure to
		// remove the build Domain is reported, not fatal.
		if rerr := b.Sandbox.Remove(context.WithoutCancel(ctx)); rerr != nil {
			fmt.Fprintf(b.Out, "lazaret: warning: could not remove the recipe build's Domain: %v (`lazaret rm --all` removes it)\n", rerr)
		}
	}()
	if err := b.Sandbox.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the recipe build sandbox: %w", err)
	}
	received := b.Sandbox.Received(ctx)
	first := received
	for i, step := range b.Recipe.Run {
		fmt.Fprintf(b.Out, "lazaret: [%d/%d] %s\n", i+1, n, oneLine(step))
		t := b.Now()
		pw := &prefixWriter{w: b.Out, prefix: "  | "}
		code, err := b.Sandbox.Run(ctx, step, pw)
		if pw.mid {
			fmt.Fprintln(b.Out)
		}
		if err != nil {
			return nil, fmt.Errorf("recipe step %d/%d: %w", i+1, n, err)
		}
		el := b.Now().Sub(t)
		now := b.Sandbox.Received(ctx)
		if code != 0 {
			fmt.Fprintf(b.Out, "lazaret: [%d/%d] failed with exit status %d after %s\n", i+1, n, code, el.Round(100*time.Millisecond))
			return nil, &StepError{Index: i + 1, Count: n, Step: step, Code: code, Elapsed: el}
		}
		fmt.Fprintf(b.Out, "lazaret: [%d/%d] done in %s, %s downloaded\n", i+1, n, el.Round(100*time.Millisecond), Size(now-received))
		received = now
	}
	if err := b.Sandbox.Stop(ctx); err != nil {
		return nil, fmt.Errorf("stop the recipe build sandbox: %w", err)
	}
	fmt.Fprintf(b.Out, "lazaret: committing the changes under %s as a layer\n", strings.Join(config.DefaultPersistentPaths, " "))
	rec = &Record{Version: RecordVersion, Digest: b.Recipe.Digest, Format: config.RecipeFormat, Base: b.Recipe.Base,
		BaseManifest: b.BaseManifest, Steps: b.Recipe.Run, Downloaded: received - first}
	pr, pw := io.Pipe()
	go func() {
		st, err := b.Sandbox.Export(ctx, pw)
		rec.Layer = st // before the reader sees the end of the layer
		pw.CloseWithError(err)
	}()
	res, err := imagebuild.AppendLayer(ctx, imagebuild.Derived{
		Base: b.Base, BaseTag: b.BaseTag, Dest: b.Layout, Tag: imagebuild.DefaultTag,
		Layer: pr, CreatedBy: "lazaret recipe " + b.Recipe.Digest, Created: start,
		Files: func() (map[string][]byte, error) {
			rec.Built = b.Now().UTC()
			rec.Seconds = rec.Built.Sub(start).Seconds()
			js, err := json.MarshalIndent(rec, "", "  ")
			return map[string][]byte{RecordFile: append(js, '\n')}, err
		},
	})
	pr.CloseWithError(errors.New("the layer was not read to its end")) // ends an export still writing
	if err != nil {
		return nil, fmt.Errorf("publish the recipe image: %w", err)
	}
	fmt.Fprintf(b.Out, "lazaret: built the image of profile %s in %s: %d files, %s in the layer, %s downloaded (%s)\n",
		b.Profile, time.Duration(rec.Seconds*float64(time.Second)).Round(100*time.Millisecond), rec.Layer.Files, Size(rec.Layer.Bytes), Size(rec.Downloaded), res.ManifestDigest)
	return rec, nil
}

// Size renders a byte count for progress lines.
func Size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// oneLine shortens a step for a header: its first line, at most 100
// characters.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	more := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, more = s[:i], true
	}
	if len(s) > 100 {
		s, more = s[:100], true
	}
	if more {
		s += " …"
	}
	return s
}

// prefixWriter writes each line with a prefix (a step's output under its
// header).
type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool // inside a line
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var out bytes.Buffer
	for _, c := range b {
		if !p.mid {
			out.WriteString(p.prefix)
			p.mid = true
		}
		out.WriteByte(c)
		if c == '\n' {
			p.mid = false
		}
	}
	if _, err := p.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
