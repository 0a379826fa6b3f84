package prepared

import (
	"context"
	"errors"

	"github.com/lazaret/lazaret/pkg/catalog"
)

// Reusable returns the record of artifact id, prepared from
// manifestDigest, when a start may reuse it as it is: its tree validates
// (Lookup) and the Storage Catalog records it Published. found is false
// otherwise (no tree, or a tree the catalog does not record as Published:
// a preparation, a reclamation or a recovery must settle it first, under
// the artifact's preparation lock).
func (st *Store) Reusable(ctx context.Context, cat *catalog.Catalog, id, manifestDigest string) (*Record, bool, error) {
	rec, found, err := st.Lookup(id, manifestDigest)
	if err != nil || !found {
		return nil, false, err
	}
	var published bool
	if err := cat.View(ctx, func(tx *catalog.Tx) error {
		a, err := tx.Artifact(id)
		published = err == nil && a.GetState() == catalog.Published
		if errors.Is(err, catalog.ErrNotFound) {
			err = nil
		}
		return err
	}); err != nil {
		return nil, false, err
	}
	return rec, published, nil
}

// FindReusable is Reusable for the image with manifestDigest under
// storageRoot, opening nothing it would create: the start's reuse check,
// which needs no image library once the manifest's digest is known
// (package ocilayout reads it from a local layout). found is false when
// the Storage Root has no reusable artifact for it, and the start
// prepares it (package prepare).
func FindReusable(ctx context.Context, storageRoot, manifestDigest string, opts catalog.Options) (Artifact, bool, error) {
	id := ArtifactID(manifestDigest)
	return lookupIn(storageRoot, id, func(st *Store) (*Record, bool, error) {
		cat, err := catalog.New(storageRoot, opts)
		if err != nil {
			return nil, false, err
		}
		return st.Reusable(ctx, cat, id, manifestDigest)
	})
}
