package prepare

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"

	digest "github.com/opencontainers/go-digest"

	"github.com/lazaret/lazaret/pkg/prepared"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/pkg/compression"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/chrootarchive"
)

const maxSkippedPaths = 32

type applyCounts struct {
	bytes           int64
	skippedDevices  int
	skippedPaths    []string
	whiteoutDevices int
}

// applyLayers streams every layer, bottom first, through verification and
// the device filter into chrootarchive.ApplyUncompressedLayer.
func applyLayers(ctx context.Context, img *resolvedImage, stg *prepared.Staging, log *slog.Logger, progress io.Writer) (*applyCounts, error) {
	counts := &applyCounts{}
	total, done := img.totalBytes(), int64(0)
	for i, layer := range img.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		llog := log.With("layer", i, "layer_digest", layer.Digest.String())
		fmt.Fprintf(progress, "prepare: layer %d/%d %s (%s; %s of %s)\n", i+1, len(img.layers), layer.Digest.Encoded()[:12],
			prepared.HumanBytes(layer.Size), prepared.HumanBytes(done+max(layer.Size, 0)), prepared.HumanBytes(total))
		done += max(layer.Size, 0)
		llog.Debug("applying layer", "size", layer.Size)
		if err := applyLayer(ctx, img, i, stg, counts, llog); err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, layer.Digest, err)
		}
	}
	return counts, nil
}

func applyLayer(ctx context.Context, img *resolvedImage, i int, stg *prepared.Staging, counts *applyCounts, log *slog.Logger) error {
	layer := img.layers[i]
	blob, _, err := img.src.GetBlob(ctx, layer, none.NoCache)
	if err != nil {
		return fmt.Errorf("fetch blob: %w", err)
	}
	defer blob.Close()

	// The applying child chroots into the rootfs by path; resolve the
	// path for each layer so it always names our descriptor's directory.
	dest, err := stg.RootfsPath()
	if err != nil {
		return err
	}

	pr, pw := io.Pipe()
	filterDone := make(chan error, 1)
	go func() {
		err := filterLayer(ctx, blob, layer.Digest, img.diffIDs[i], pw, counts, log)
		pw.CloseWithError(err)
		filterDone <- err
	}()
	size, applyErr := chrootarchive.ApplyUncompressedLayer(dest, pr, &archive.TarOptions{})
	// Unblock the filter if the child stopped reading early.
	pr.CloseWithError(errors.New("layer application ended"))
	filterErr := <-filterDone
	if filterErr != nil {
		return filterErr // verification or read errors explain an apply failure best
	}
	if applyErr != nil {
		return fmt.Errorf("apply: %w", applyErr)
	}
	counts.bytes += size
	return nil
}

// filterLayer verifies and decompresses one layer blob and re-emits its tar
// stream without device nodes: 0/0 character devices become OCI whiteouts,
// other block and character devices are dropped and counted. It checks the
// compressed digest and the diff ID after reading the whole stream.
func filterLayer(ctx context.Context, blob io.Reader, blobDigest, diffID digest.Digest, out io.Writer, counts *applyCounts, log *slog.Logger) error {
	blobVerifier := blobDigest.Verifier()
	diffVerifier := diffID.Verifier()
	compressed := io.TeeReader(&ctxReader{ctx: ctx, r: blob}, blobVerifier)
	decompressed, _, err := compression.AutoDecompress(compressed)
	if err != nil {
		return fmt.Errorf("decompress: %w", err)
	}
	defer decompressed.Close()
	raw := io.TeeReader(decompressed, diffVerifier)
	tr := tar.NewReader(bufio.NewReaderSize(raw, 1<<20))
	bw := bufio.NewWriterSize(out, 1<<20)
	tw := tar.NewWriter(bw)
	buf := make([]byte, 1<<20)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer tar: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeChar, tar.TypeBlock:
			if hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 {
				wh, err := whiteoutFor(hdr)
				if err != nil {
					return err
				}
				counts.whiteoutDevices++
				hdr = wh
				break
			}
			counts.skippedDevices++
			if len(counts.skippedPaths) < maxSkippedPaths {
				counts.skippedPaths = append(counts.skippedPaths, "/"+strings.TrimPrefix(path.Clean("/"+hdr.Name), "/"))
			}
			log.Debug("skipping device node", "path", hdr.Name, "major", hdr.Devmajor, "minor", hdr.Devminor)
			continue
		case tar.TypeGNUSparse:
			hdr.Typeflag = tar.TypeReg // the reader expands sparse files
		}
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				delete(hdr.PAXRecords, k)
			}
		}
		hdr.Format = tar.FormatPAX // can encode every field the reader produced
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("re-encode %s: %w", hdr.Name, err)
		}
		if _, err := io.CopyBuffer(tw, tr, buf); err != nil {
			return fmt.Errorf("read layer tar: %s: %w", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	// Hash everything after the end-of-archive marker as well.
	if _, err := io.CopyBuffer(io.Discard, raw, buf); err != nil {
		return fmt.Errorf("read layer: %w", err)
	}
	if _, err := io.CopyBuffer(io.Discard, compressed, buf); err != nil {
		return fmt.Errorf("read layer blob: %w", err)
	}
	if !blobVerifier.Verified() {
		return fmt.Errorf("blob does not match its digest %s", blobDigest)
	}
	if !diffVerifier.Verified() {
		return fmt.Errorf("uncompressed layer does not match diff ID %s from the image config", diffID)
	}
	return nil
}

// whiteoutFor turns a 0/0 character device (overlayfs whiteout) into the
// OCI whiteout file for the same path.
func whiteoutFor(hdr *tar.Header) (*tar.Header, error) {
	clean := path.Clean("/" + hdr.Name)
	if clean == "/" {
		return nil, fmt.Errorf("whiteout device at the archive root")
	}
	dir, base := path.Split(clean)
	return &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(dir, "/") + archive.WhiteoutPrefix + base,
		Mode:     0o600,
		ModTime:  hdr.ModTime,
		Format:   tar.FormatPAX,
	}, nil
}

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

// checkIdentityMap refuses to prepare without namespace-root and the full
// subordinate id map: owners outside the map cannot be applied.
func checkIdentityMap() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("preparation must run as root of the Runtime Supervisor's user namespace (euid is %d)", os.Geteuid())
	}
	for _, f := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if !coversIDs(string(b), 65536) {
			return fmt.Errorf("%s does not map ids 0-65535 (%q): preparation needs the full subordinate id map "+
				"(/etc/subuid and /etc/subgid ranges of 65536 for the user)", f, strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// coversIDs reports whether an id map maps every inside id in [0, n).
func coversIDs(idMap string, n uint64) bool {
	type rng struct{ lo, hi uint64 }
	var rs []rng
	for _, line := range strings.Split(idMap, "\n") {
		var in, out, cnt uint64
		if _, err := fmt.Sscan(line, &in, &out, &cnt); err != nil {
			continue
		}
		rs = append(rs, rng{in, in + cnt})
	}
	next := uint64(0)
	for progress := true; progress && next < n; {
		progress = false
		for _, r := range rs {
			if r.lo <= next && next < r.hi {
				next = r.hi
				progress = true
			}
		}
	}
	return next >= n
}
