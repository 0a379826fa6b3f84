// Package imagebuild builds Lazaret base images locally, without any
// container registry, as OCI image layouts.
//
// Two kinds exist:
//
//   - "busybox": a tiny image made from the host's Debian busybox-static
//     (/bin/busybox). The rootfs tar is written directly in Go with owners 0:0,
//     fixed modes and fixed mtimes, so no user namespace is needed and the
//     result is reproducible for a given busybox binary.
//   - "debian": Debian 12 (bookworm) produced by mmdebstrap from apt's
//     configured mirror (--mode=unshare for a non-root user with subordinate
//     id ranges, --mode=root when run as root).
//
// Build is meant to run as the (non-root) user who will consume the layout,
// so that blobs are readable by that user. The layout is assembled in a
// staging directory beside the destination and published by rename: an
// interrupted build never leaves a half-written layout at the destination
// and a rebuild replaces the previous layout atomically (renameat2
// RENAME_EXCHANGE). A published layout holds exactly one tagged image.
package imagebuild

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/lazaret/lazaret/pkg/proc"
)

// Kind names accepted by Build.
const (
	KindBusybox = "busybox"
	KindDebian  = "debian"
)

// DefaultTag is the tag used when Options.Tag is empty.
const DefaultTag = "latest"

// Options configures Build.
type Options struct {
	// Kind is "busybox" or "debian".
	Kind string
	// Dest is the OCI image layout directory to create or replace.
	Dest string
	// Tag is the org.opencontainers.image.ref.name of the image in the
	// layout; DefaultTag when empty.
	Tag string
	// Progress receives human-readable progress (mmdebstrap's output for
	// "debian"). May be nil.
	Progress io.Writer
	// Logger receives structured logs. May be nil.
	Logger *slog.Logger
	// Broker spawns and reaps the build's helper processes (mmdebstrap,
	// busybox --list-full): the calling process's one broker.
	Broker *proc.Broker
}

// Result describes a published layout.
type Result struct {
	// Dest is the layout directory, as given in Options.Dest.
	Dest string
	// Tag is the image's tag in the layout.
	Tag string
	// ManifestDigest is the digest of the image manifest ("sha256:…").
	ManifestDigest string
}

var kinds = []string{KindBusybox, KindDebian}

// Kinds returns the image kinds Build accepts.
func Kinds() []string {
	return slices.Clone(kinds)
}

// Build builds the image of the given kind and publishes it as an OCI image
// layout at opts.Dest. Use the reference "oci:DEST:TAG" to consume it.
func Build(ctx context.Context, opts Options) (Result, error) {
	if opts.Tag == "" {
		opts.Tag = DefaultTag
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Dest == "" {
		return Result{}, fmt.Errorf("image build %s: no destination directory given", opts.Kind)
	}
	if opts.Broker == nil {
		return Result{}, fmt.Errorf("image build %s: no process broker given", opts.Kind)
	}
	if err := validateTag(opts.Tag); err != nil {
		return Result{}, fmt.Errorf("image build %s: %w", opts.Kind, err)
	}
	log := opts.Logger.With("image_kind", opts.Kind, "image_dest", opts.Dest, "image_tag", opts.Tag)
	switch opts.Kind {
	case KindBusybox:
		return buildBusybox(ctx, opts, log)
	case KindDebian:
		return buildDebian(ctx, opts, log)
	default:
		return Result{}, fmt.Errorf("image build: unknown image kind %q (valid kinds: %s)", opts.Kind, strings.Join(kinds, ", "))
	}
}

// validateTag applies the OCI image-layout ref.name grammar loosely: a
// non-empty string of alphanumerics and the separators "-._:@/+".
func validateTag(tag string) error {
	if len(tag) > 128 {
		return fmt.Errorf("tag %q is longer than 128 characters", tag)
	}
	for _, r := range tag {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("-._:@/+", r):
		default:
			return fmt.Errorf("tag %q contains %q: use letters, digits and -._:@/+", tag, r)
		}
	}
	return nil
}
