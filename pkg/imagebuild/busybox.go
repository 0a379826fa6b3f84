package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/proc"
)

// BusyboxPath is the host binary the busybox image is made from (Debian
// package busybox-static).
const BusyboxPath = "/bin/busybox"

// busyboxEpoch is the fixed mtime of every busybox rootfs entry and the
// image's creation time, unless SOURCE_DATE_EPOCH is set.
var busyboxEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func buildBusybox(ctx context.Context, opts Options, log *slog.Logger) (Result, error) {
	start := time.Now()
	rootfs, err := busyboxRootfs(ctx, opts.Broker, BusyboxPath, sourceDateEpoch(busyboxEpoch))
	if err != nil {
		return Result{}, fmt.Errorf("image build busybox: %w", err)
	}
	fmt.Fprintf(opts.Progress, "busybox: rootfs tar %d bytes, writing OCI layout %s\n", len(rootfs), opts.Dest)
	res, err := WriteLayout(ctx, opts.Dest, opts.Tag, ImageConfig{
		Cmd:        []string{"/bin/sh"},
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"},
		WorkingDir: "/",
		Created:    sourceDateEpoch(busyboxEpoch),
	}, bytes.NewReader(rootfs))
	if err != nil {
		return Result{}, fmt.Errorf("image build busybox: %w", err)
	}
	log.Info("image built", "manifest_digest", res.ManifestDigest, "rootfs_bytes", len(rootfs), "duration", time.Since(start))
	fmt.Fprintf(opts.Progress, "busybox: published %s:%s (%s)\n", res.Dest, res.Tag, res.ManifestDigest)
	return res, nil
}

// busyboxRootfs returns an uncompressed rootfs tar: the busybox binary, a
// symlink for every applet, minimal /etc and the standard directories.
func busyboxRootfs(ctx context.Context, broker *proc.Broker, binary string, mtime time.Time) ([]byte, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read %s (install Debian package busybox-static): %w", binary, err)
	}
	if err := checkStatic(binary); err != nil {
		return nil, err
	}
	out, _, st, err := broker.Output(ctx, "busybox --list-full", proc.Command{Path: binary, Args: []string{"busybox", "--list-full"}}, 1<<20)
	if err == nil && (!st.Exited || st.Code != 0) {
		err = fmt.Errorf("%s", st)
	}
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", binary, err)
	}
	// applet name -> full path ("usr/bin/awk"); every applet also gets /bin/NAME.
	links := map[string]string{} // link path -> target
	dirs := map[string]bool{"bin": true}
	for _, line := range strings.Fields(string(out)) {
		name := path.Base(line)
		if name == "busybox" || name == "." || name == "/" {
			continue
		}
		links["bin/"+name] = "busybox"
		if dir := path.Dir(line); dir != "." && dir != "bin" {
			links[line] = "/bin/busybox"
			for d := dir; d != "."; d = path.Dir(d) {
				dirs[d] = true
			}
		}
	}
	if len(links) == 0 {
		return nil, fmt.Errorf("%s --list-full printed no applets", binary)
	}

	type entry struct {
		hdr  tar.Header
		body []byte
	}
	dirModes := map[string]int64{
		"bin": 0o755, "dev": 0o755, "etc": 0o755, "proc": 0o555, "root": 0o700,
		"sys": 0o555, "tmp": 0o1777, "usr": 0o755, "var": 0o755, "var/tmp": 0o1777,
	}
	for d := range dirs {
		if _, ok := dirModes[d]; !ok {
			dirModes[d] = 0o755
		}
	}
	var entries []entry
	entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}})
	dirNames := make([]string, 0, len(dirModes))
	for d := range dirModes {
		dirNames = append(dirNames, d)
	}
	slices.Sort(dirNames) // parents sort before children
	for _, d := range dirNames {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirModes[d]}})
	}
	files := []entry{
		{hdr: tar.Header{Name: "bin/busybox", Mode: 0o755}, body: bin},
		{hdr: tar.Header{Name: "etc/passwd", Mode: 0o644}, body: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		{hdr: tar.Header{Name: "etc/group", Mode: 0o644}, body: []byte("root:x:0:\n")},
	}
	for _, f := range files {
		f.hdr.Typeflag = tar.TypeReg
		f.hdr.Size = int64(len(f.body))
		entries = append(entries, f)
	}
	linkNames := make([]string, 0, len(links))
	for l := range links {
		linkNames = append(linkNames, l)
	}
	slices.Sort(linkNames)
	for _, l := range linkNames {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: l, Linkname: links[l], Mode: 0o777}})
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.ModTime = mtime
		e.hdr.Uid, e.hdr.Gid = 0, 0
		e.hdr.Uname, e.hdr.Gname = "root", "root"
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.hdr.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkStatic refuses a dynamically linked busybox: it would not run in an
// image without a C library.
func checkStatic(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: install Debian package busybox-static (it replaces busybox)", binary)
		}
	}
	return nil
}

// sourceDateEpoch honours SOURCE_DATE_EPOCH (reproducible-builds.org) and
// falls back to def.
func sourceDateEpoch(def time.Time) time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC()
		}
	}
	return def
}
