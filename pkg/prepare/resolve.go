package prepare

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	digest "github.com/opencontainers/go-digest"

	"github.com/lazaret/lazaret/pkg/prepared"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"

	// Only the transports Lazaret supports are linked (alltransports would
	// also link containers-storage and every graph driver).
	_ "go.podman.io/image/v5/docker"
	_ "go.podman.io/image/v5/docker/archive"
	_ "go.podman.io/image/v5/oci/archive"
	_ "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/transports"
	"go.podman.io/image/v5/types"
)

// resolvedImage is one single-platform image opened for preparation:
// resolve names its manifest (all a reuse needs), readConfig adds its
// verified config and layers (what a preparation needs).
type resolvedImage struct {
	ref      string
	sys      *types.SystemContext
	src      types.ImageSource
	unparsed *image.UnparsedImage
	source   prepared.SourceIdentity
	layers   []types.BlobInfo
	diffIDs  []digest.Digest
}

func (r *resolvedImage) close() {
	if r.src != nil {
		_ = r.src.Close()
	}
}

// totalBytes is the sum of the compressed layer sizes (unknown sizes count 0).
func (r *resolvedImage) totalBytes() int64 {
	var n int64
	for _, l := range r.layers {
		n += max(l.Size, 0)
	}
	return n
}

func (r *resolvedImage) layerRecords() []prepared.LayerRecord {
	out := make([]prepared.LayerRecord, len(r.layers))
	for i, l := range r.layers {
		out[i] = prepared.LayerRecord{Digest: l.Digest.String(), DiffID: r.diffIDs[i].String(), MediaType: l.MediaType, Size: l.Size}
	}
	return out
}

// resolve opens imageRef and picks the instance for this platform from a
// manifest list: its manifest digest identifies the prepared lower. The
// config is read only for a preparation (readConfig): a start that reuses
// its lower reads manifests only, not the config blob (from a registry, one
// request fewer).
func resolve(ctx context.Context, imageRef string) (_ *resolvedImage, retErr error) {
	ref, err := parseImageName(imageRef)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: parse image reference: %w (%w; use oci:PATH[:TAG] for a local OCI layout or docker://REGISTRY/NAME[:TAG] for a registry)",
			imageRef, err, ErrBadReference)
	}
	sys := &types.SystemContext{}
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: open image: %w (%w%s)", imageRef, err, ErrBadReference, refHint(imageRef))
	}
	r := &resolvedImage{ref: imageRef, sys: sys, src: src}
	defer func() {
		if retErr != nil {
			r.close()
		}
	}()
	unparsed := image.UnparsedInstance(src, nil)
	mb, mt, err := unparsed.Manifest(ctx)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: read manifest: %w", imageRef, err)
	}
	if manifest.MIMETypeIsMultiImage(mt) {
		list, err := manifest.ListFromBlob(mb, mt)
		if err != nil {
			return nil, fmt.Errorf("prepare %s: parse manifest list: %w", imageRef, err)
		}
		inst, err := list.ChooseInstance(sys)
		if err != nil {
			return nil, fmt.Errorf("prepare %s: no image for linux/%s in manifest list: %w", imageRef, runtime.GOARCH, err)
		}
		unparsed = image.UnparsedInstance(src, &inst)
		if mb, _, err = unparsed.Manifest(ctx); err != nil { // digest-checked against inst
			return nil, fmt.Errorf("prepare %s: read manifest %s: %w", imageRef, inst, err)
		}
	}
	md, err := manifest.Digest(mb)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: manifest digest: %w", imageRef, err)
	}
	r.unparsed = unparsed
	r.source = prepared.SourceIdentity{Ref: transports.ImageName(ref), ManifestDigest: md.String()}
	return r, nil
}

// readConfig reads and verifies the image's config (its platform, its
// layers' diff IDs) and lists its layers.
func (r *resolvedImage) readConfig(ctx context.Context) error {
	imageRef := r.ref
	img, err := image.FromUnparsedImage(ctx, r.sys, r.unparsed)
	if err != nil {
		return fmt.Errorf("prepare %s: parse manifest: %w", imageRef, err)
	}
	cfg, err := img.OCIConfig(ctx) // verifies the config blob's digest
	if err != nil {
		return fmt.Errorf("prepare %s: read image config: %w", imageRef, err)
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return fmt.Errorf("prepare %s: image is for %s, not linux", imageRef, cfg.OS)
	}
	if cfg.Architecture != "" && cfg.Architecture != runtime.GOARCH {
		return fmt.Errorf("prepare %s: image is for %s, this host runs %s", imageRef, cfg.Architecture, runtime.GOARCH)
	}
	r.source.ConfigDigest = img.ConfigInfo().Digest.String()
	r.layers = img.LayerInfos()
	r.diffIDs = cfg.RootFS.DiffIDs
	if len(r.layers) == 0 {
		return fmt.Errorf("prepare %s: image has no layers", imageRef)
	}
	if len(r.diffIDs) != len(r.layers) {
		return fmt.Errorf("prepare %s: manifest lists %d layers but config has %d diff IDs", imageRef, len(r.layers), len(r.diffIDs))
	}
	for i, l := range r.layers {
		if err := l.Digest.Validate(); err != nil {
			return fmt.Errorf("prepare %s: layer %d digest: %w", imageRef, i, err)
		}
		if err := r.diffIDs[i].Validate(); err != nil {
			return fmt.Errorf("prepare %s: layer %d diff ID: %w", imageRef, i, err)
		}
	}
	return nil
}

func refHint(imageRef string) string {
	switch {
	case strings.HasPrefix(imageRef, "oci:"):
		// oci:PATH:TAG; Lazaret's own layouts are named for the image.
		path := strings.TrimPrefix(imageRef, "oci:")
		if i := strings.LastIndex(path, ":"); i > 0 {
			path = path[:i]
		}
		switch name := filepath.Base(path); {
		case name == "busybox" || name == "debian":
			return fmt.Sprintf("; the image layout at %s is missing or damaged: build it again with `lazaret image build %s`", path, name)
		case strings.HasPrefix(name, "recipe-"):
			return fmt.Sprintf("; the recipe image layout at %s is missing or damaged: build it again with `lazaret image build PROFILE --force` for the profile whose recipe it is (`lazaret profile list` shows each profile's image)", path)
		}
		return "; check that PATH is an OCI image layout (index.json, blobs/) and that it holds the TAG " +
			"(build one with `lazaret image build busybox|debian`)"
	case strings.HasPrefix(imageRef, "docker://"):
		return "; check the registry name, the repository and tag, network access and registry credentials"
	}
	return ""
}

// parseImageName parses TRANSPORT:REFERENCE for the linked transports.
func parseImageName(s string) (types.ImageReference, error) {
	name, rest, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("%q has no transport prefix", s)
	}
	t := transports.Get(name)
	if t == nil {
		return nil, fmt.Errorf("unknown transport %q (supported: %s)", name, strings.Join(transports.ListNames(), ", "))
	}
	return t.ParseReference(rest)
}
