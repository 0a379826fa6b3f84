package imagebuild

import (
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

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Derived describes an image made of a base image's layers plus one more.
type Derived struct {
	// Base is the OCI layout holding the base image and BaseTag its tag
	// ("" when the layout holds exactly one image).
	Base, BaseTag string
	// Dest is the layout to create or replace; Tag the new image's tag.
	Dest, Tag string
	// Layer is the new top layer, an uncompressed tar stream.
	Layer io.Reader
	// CreatedBy is recorded in the new layer's history entry.
	CreatedBy string
	// Created is the new image's creation time (also of its history entry).
	Created time.Time
	// Files, when not nil, is called once the layer is written and returns
	// files to write into the layout's top directory beside index.json
	// before it is published (records of the build); names are plain.
	Files func() (map[string][]byte, error)
}

// AppendLayer writes the layout d.Dest holding one image: the base image's
// layers (hard-linked from the base layout where possible, else copied),
// then d.Layer, with the base's configuration extended by the new layer.
// Like WriteLayout it stages beside the destination and publishes by
// rename, so a failure leaves no image and an existing one untouched.
func AppendLayer(ctx context.Context, d Derived) (Result, error) {
	dest := filepath.Clean(d.Dest)
	fail := func(err error) (Result, error) { return Result{}, fmt.Errorf("write layout %s: %w", dest, err) }
	if err := validateTag(d.Tag); err != nil {
		return fail(err)
	}
	base, err := ReadImage(d.Base, d.BaseTag)
	if err != nil {
		return fail(err)
	}
	if err := checkReplaceable(dest); err != nil {
		return fail(err)
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fail(err)
	}
	staging, err := os.MkdirTemp(parent, "."+filepath.Base(dest)+".staging-")
	if err != nil {
		return fail(fmt.Errorf("create staging directory: %w", err))
	}
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(staging)
		}
	}()
	if err := os.Chmod(staging, 0o755); err != nil {
		return fail(err)
	}
	blobs := filepath.Join(staging, v1.ImageBlobsDir, string(digest.SHA256))
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fail(err)
	}
	layout, _ := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err := writeFileSync(filepath.Join(staging, v1.ImageLayoutFile), layout); err != nil {
		return fail(err)
	}
	for _, l := range base.Manifest.Layers {
		if err := linkBlob(d.Base, blobs, l.Digest); err != nil {
			return fail(fmt.Errorf("base layer %s: %w", l.Digest, err))
		}
	}
	desc, diffID, err := writeLayerBlob(ctx, blobs, d.Layer)
	if err != nil {
		return fail(fmt.Errorf("new layer: %w", err))
	}
	cfg := base.Config
	cfg.RootFS.DiffIDs = append(append([]digest.Digest{}, cfg.RootFS.DiffIDs...), diffID)
	h := v1.History{CreatedBy: d.CreatedBy, Comment: "lazaret recipe"}
	if !d.Created.IsZero() {
		created := d.Created.UTC()
		cfg.Created, h.Created = &created, &created
	}
	cfg.History = append(append([]v1.History{}, cfg.History...), h)
	configDesc, err := writeJSONBlob(blobs, v1.MediaTypeImageConfig, cfg)
	if err != nil {
		return fail(fmt.Errorf("config: %w", err))
	}
	m := v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    append(append([]v1.Descriptor{}, base.Manifest.Layers...), desc),
	}
	mdesc, err := writeJSONBlob(blobs, v1.MediaTypeImageManifest, m)
	if err != nil {
		return fail(fmt.Errorf("manifest: %w", err))
	}
	mdesc.Annotations = map[string]string{v1.AnnotationRefName: d.Tag}
	platform := v1.Platform{Architecture: cfg.Architecture, OS: cfg.OS}
	mdesc.Platform = &platform
	index, _ := json.Marshal(v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{mdesc}})
	if err := writeFileSync(filepath.Join(staging, v1.ImageIndexFile), index); err != nil {
		return fail(err)
	}
	if d.Files != nil {
		files, err := d.Files()
		if err != nil {
			return fail(err)
		}
		for name, b := range files {
			if name == "" || strings.ContainsAny(name, "/\x00") || name == v1.ImageLayoutFile || name == v1.ImageIndexFile || name == v1.ImageBlobsDir || strings.HasPrefix(name, ".") {
				return fail(fmt.Errorf("extra file name %q is not a plain name beside index.json", name))
			}
			if err := writeFileSync(filepath.Join(staging, name), b); err != nil {
				return fail(err)
			}
		}
	}
	for _, dir := range []string{blobs, filepath.Dir(blobs), staging} {
		if err := syncDir(dir); err != nil {
			return fail(err)
		}
	}
	if err := publishDir(staging, dest); err != nil {
		return fail(fmt.Errorf("publish: %w", err))
	}
	published = true
	return Result{Dest: dest, Tag: d.Tag, ManifestDigest: mdesc.Digest.String()}, nil
}

// Image is one image of an OCI layout.
type Image struct {
	ManifestDigest digest.Digest
	Manifest       v1.Manifest
	Config         v1.Image
}

// ReadImage reads the image tagged tag ("" for the layout's only image)
// from the OCI layout dir, checking the digests of its manifest and
// configuration.
func ReadImage(dir, tag string) (Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, v1.ImageIndexFile))
	if err != nil {
		return Image{}, fmt.Errorf("read image layout %s: %w", dir, err)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return Image{}, fmt.Errorf("image layout %s: index.json: %w", dir, err)
	}
	var found []v1.Descriptor
	for _, m := range idx.Manifests {
		if tag == "" || m.Annotations[v1.AnnotationRefName] == tag {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		return Image{}, fmt.Errorf("image layout %s: %d images tagged %q, want exactly one", dir, len(found), tag)
	}
	var img Image
	img.ManifestDigest = found[0].Digest
	if err := readJSONBlob(dir, found[0].Digest, &img.Manifest); err != nil {
		return Image{}, fmt.Errorf("image layout %s: manifest: %w", dir, err)
	}
	if err := readJSONBlob(dir, img.Manifest.Config.Digest, &img.Config); err != nil {
		return Image{}, fmt.Errorf("image layout %s: config: %w", dir, err)
	}
	return img, nil
}

func readJSONBlob(dir string, d digest.Digest, v any) error {
	if err := d.Validate(); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, v1.ImageBlobsDir, d.Algorithm().String(), d.Encoded()))
	if err != nil {
		return err
	}
	if digest.FromBytes(b) != d {
		return fmt.Errorf("blob %s does not match its digest", d)
	}
	return json.Unmarshal(b, v)
}

// linkBlob hard-links (or copies) blob d of layout src into blobs.
func linkBlob(src, blobs string, d digest.Digest) error {
	if err := d.Validate(); err != nil {
		return err
	}
	from := filepath.Join(src, v1.ImageBlobsDir, d.Algorithm().String(), d.Encoded())
	to := filepath.Join(blobs, d.Encoded())
	err := os.Link(from, to)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
