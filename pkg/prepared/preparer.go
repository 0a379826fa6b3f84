package prepared

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// PreparerArg is the hidden role of lazaret-cli that prepares a lower
// (package prepare's Main): the Runtime Supervisor, which does not link
// the image library, runs it in its own namespaces when a start finds no
// reusable artifact (no tree of the image, or one the Storage Catalog does
// not record Published). Its flags name the Storage Root, the
// image reference, and the Domain generation preparing it; it writes
// progress lines to its standard output, logs to its standard error and
// its PreparerResult as one JSON line to descriptor 3.
const PreparerArg = "__lazaret-prepare-lower"

// PreparerResultVersion is the version of PreparerResult; a reader refuses
// a newer one.
const PreparerResultVersion = 1

// PreparerResult is the outcome of one run of the preparer role: the
// artifact it prepared or reused, or its error's text and category word
// (package errdefs).
type PreparerResult struct {
	Version        int    `json:"version"`
	ArtifactID     string `json:"artifact_id,omitempty"`
	ManifestDigest string `json:"manifest_digest,omitempty"`
	Error          string `json:"error,omitempty"`
	Category       string `json:"category,omitempty"`
}

// ReadPreparerResult decodes the preparer's result from r and returns the
// artifact's ID and manifest digest, or the preparer's error with its
// category.
func ReadPreparerResult(r io.Reader) (id, manifestDigest string, err error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return "", "", errdefs.Mark(fmt.Errorf("read the preparer's result: %w", err), errdefs.ErrInternal)
	}
	if len(b) == 0 {
		return "", "", errdefs.New(errdefs.ErrInternal, "the preparer exited without a result (the Domain log has its lines)")
	}
	var res PreparerResult
	if err := json.Unmarshal(b, &res); err != nil {
		return "", "", errdefs.Mark(fmt.Errorf("the preparer's result: %w", err), errdefs.ErrCorrupt)
	}
	if res.Version > PreparerResultVersion || res.Version < 1 {
		return "", "", errdefs.New(errdefs.ErrRefused, "the preparer's result has version %d, this supervisor reads up to %d: lazaret-cli and lazaret-rs are from different releases; reinstall Lazaret", res.Version, PreparerResultVersion)
	}
	if res.Error != "" {
		return "", "", errdefs.Mark(fmt.Errorf("%s", res.Error), errdefs.FromCategory(res.Category))
	}
	if !ValidID(res.ArtifactID) || res.ArtifactID != ArtifactID(res.ManifestDigest) {
		return "", "", errdefs.New(errdefs.ErrCorrupt, "the preparer's result names artifact %q for manifest %q", res.ArtifactID, res.ManifestDigest)
	}
	return res.ArtifactID, res.ManifestDigest, nil
}
