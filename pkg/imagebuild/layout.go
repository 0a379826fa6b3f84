package imagebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/klauspost/pgzip"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// ImageConfig is the runtime part of the image configuration written by
// WriteLayout.
type ImageConfig struct {
	Cmd        []string
	Env        []string
	WorkingDir string
	// Created is recorded in the config when non-zero. Keep it fixed for
	// reproducible output.
	Created time.Time
}

// WriteLayout writes an OCI image layout at dest holding exactly one image,
// tagged tag, whose layers are the given uncompressed tar streams (bottom
// layer first). Each layer is stored gzip-compressed with a header carrying
// no name and no mtime, so identical input gives identical digests.
//
// The layout is assembled in a staging directory beside dest and published
// by rename; an existing layout at dest is replaced atomically. WriteLayout
// refuses to replace a non-empty directory that is not an OCI image layout.
func WriteLayout(ctx context.Context, dest, tag string, cfg ImageConfig, layers ...io.Reader) (Result, error) {
	dest = filepath.Clean(dest)
	if err := validateTag(tag); err != nil {
		return Result{}, fmt.Errorf("write layout %s: %w", dest, err)
	}
	if len(layers) == 0 {
		return Result{}, fmt.Errorf("write layout %s: no layers", dest)
	}
	if err := checkReplaceable(dest); err != nil {
		return Result{}, fmt.Errorf("write layout %s: %w", dest, err)
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Result{}, fmt.Errorf("write layout %s: %w", dest, err)
	}
	staging, err := os.MkdirTemp(parent, "."+filepath.Base(dest)+".staging-")
	if err != nil {
		return Result{}, fmt.Errorf("write layout %s: create staging directory: %w", dest, err)
	}
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(staging)
		}
	}()
	if err := os.Chmod(staging, 0o755); err != nil {
		return Result{}, fmt.Errorf("write layout %s: %w", dest, err)
	}
	mdesc, err := writeLayoutContent(ctx, staging, tag, cfg, layers)
	if err != nil {
		return Result{}, fmt.Errorf("write layout %s: %w", dest, err)
	}
	if err := publishDir(staging, dest); err != nil {
		return Result{}, fmt.Errorf("write layout %s: publish: %w", dest, err)
	}
	published = true
	return Result{Dest: dest, Tag: tag, ManifestDigest: mdesc.Digest.String()}, nil
}

// checkReplaceable refuses destinations that would lose unrelated data.
func checkReplaceable(dest string) error {
	fi, err := os.Lstat(dest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("destination exists and is not a directory (%s)", fi.Mode().Type())
	}
	entries, err := os.ReadDir(dest)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(dest, v1.ImageLayoutFile)); err != nil {
		return fmt.Errorf("destination is a non-empty directory without an %s file: refusing to replace it", v1.ImageLayoutFile)
	}
	return nil
}

func writeLayoutContent(ctx context.Context, dir, tag string, cfg ImageConfig, layers []io.Reader) (v1.Descriptor, error) {
	blobs := filepath.Join(dir, v1.ImageBlobsDir, string(digest.SHA256))
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return v1.Descriptor{}, err
	}
	layout, err := json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := writeFileSync(filepath.Join(dir, v1.ImageLayoutFile), layout); err != nil {
		return v1.Descriptor{}, err
	}

	var layerDescs []v1.Descriptor
	var diffIDs []digest.Digest
	for i, r := range layers {
		desc, diffID, err := writeLayerBlob(ctx, blobs, r)
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("layer %d: %w", i, err)
		}
		layerDescs = append(layerDescs, desc)
		diffIDs = append(diffIDs, diffID)
	}

	img := v1.Image{
		Platform: v1.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		Config: v1.ImageConfig{
			Cmd:        cfg.Cmd,
			Env:        cfg.Env,
			WorkingDir: cfg.WorkingDir,
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: diffIDs},
	}
	if !cfg.Created.IsZero() {
		created := cfg.Created.UTC()
		img.Created = &created
	}
	configDesc, err := writeJSONBlob(blobs, v1.MediaTypeImageConfig, img)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("config: %w", err)
	}
	m := v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    configDesc,
		Layers:    layerDescs,
	}
	mdesc, err := writeJSONBlob(blobs, v1.MediaTypeImageManifest, m)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest: %w", err)
	}
	mdesc.Annotations = map[string]string{v1.AnnotationRefName: tag}
	mdesc.Platform = &v1.Platform{Architecture: runtime.GOARCH, OS: "linux"}
	index := v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{mdesc},
	}
	ib, err := json.Marshal(index)
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := writeFileSync(filepath.Join(dir, v1.ImageIndexFile), ib); err != nil {
		return v1.Descriptor{}, err
	}
	for _, d := range []string{blobs, filepath.Dir(blobs), dir} {
		if err := syncDir(d); err != nil {
			return v1.Descriptor{}, err
		}
	}
	return mdesc, nil
}

// writeLayerBlob gzips one uncompressed tar stream into the blob directory
// and returns its descriptor and diff ID (digest of the uncompressed bytes).
func writeLayerBlob(ctx context.Context, blobs string, r io.Reader) (v1.Descriptor, digest.Digest, error) {
	tmp, err := os.CreateTemp(blobs, ".layer-*")
	if err != nil {
		return v1.Descriptor{}, "", err
	}
	defer func() {
		tmp.Close()
		_ = os.Remove(tmp.Name()) // no-op after the rename below
	}()
	compressed := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(tmp, compressed)}
	gz := pgzip.NewWriter(counter)
	// Header without name and with mtime 0 ("no time stamp"): pgzip would
	// otherwise encode the zero time.Time as a bogus 2042 date.
	gz.Name = ""
	gz.ModTime = time.Unix(0, 0)
	uncompressed := sha256.New()
	src := io.TeeReader(&ctxReader{ctx: ctx, r: r}, uncompressed)
	if _, err := io.Copy(gz, src); err != nil {
		return v1.Descriptor{}, "", err
	}
	if err := gz.Close(); err != nil {
		return v1.Descriptor{}, "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return v1.Descriptor{}, "", err
	}
	if err := tmp.Sync(); err != nil {
		return v1.Descriptor{}, "", err
	}
	d := sumDigest(compressed)
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, d.Encoded())); err != nil {
		return v1.Descriptor{}, "", err
	}
	desc := v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: d, Size: counter.n}
	return desc, sumDigest(uncompressed), nil
}

func writeJSONBlob(blobs, mediaType string, v any) (v1.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return v1.Descriptor{}, err
	}
	d := digest.FromBytes(b)
	if err := writeFileSync(filepath.Join(blobs, d.Encoded()), b); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}, nil
}

func sumDigest(h hash.Hash) digest.Digest {
	return digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil)))
}

// publishDir moves the finished staging directory to dest: a plain
// no-replace rename when dest is absent, otherwise an atomic exchange
// followed by removal of the previous layout.
func publishDir(staging, dest string) error {
	parent := filepath.Dir(dest)
	err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, dest, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		if err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, dest, unix.RENAME_EXCHANGE); err != nil {
			return &os.LinkError{Op: "renameat2(RENAME_EXCHANGE)", Old: staging, New: dest, Err: err}
		}
		// staging now holds the previous layout.
		if err := os.RemoveAll(staging); err != nil {
			return fmt.Errorf("remove previous layout: %w", err)
		}
		return syncDir(parent)
	}
	if err != nil {
		return &os.LinkError{Op: "renameat2(RENAME_NOREPLACE)", Old: staging, New: dest, Err: err}
	}
	return syncDir(parent)
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ctxReader fails reads once ctx is done, so a cancelled build stops
// promptly even while streaming a large layer.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
