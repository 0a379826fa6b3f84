package preparedcatalog

import (
	"context"
	"errors"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/prepared"
)

// Published reports whether the Storage Catalog records artifact id
// Published: a tree a start may reuse as it is. Anything else (no record,
// a preparation, a reclamation) is settled first, under the artifact's
// preparation lock, by a preparer.
func Published(ctx context.Context, cat *catalog.Catalog, id string) (bool, error) {
	var published bool
	err := cat.View(ctx, func(tx *catalog.Tx) error {
		a, err := tx.Artifact(id)
		published = err == nil && a.GetState() == catalog.Published
		if errors.Is(err, catalog.ErrNotFound) {
			err = nil
		}
		return err
	})
	return published, err
}

// Reusable returns the record of artifact id, prepared from
// manifestDigest, when a start may reuse it as it is: its tree validates
// (Store.Lookup) and the Storage Catalog records it Published. found is
// false otherwise (no tree, or a tree the catalog does not record as
// Published).
func Reusable(ctx context.Context, st *prepared.Store, cat *catalog.Catalog, id, manifestDigest string) (*prepared.Record, bool, error) {
	rec, found, err := st.Lookup(id, manifestDigest)
	if err != nil || !found {
		return nil, false, err
	}
	published, err := Published(ctx, cat, id)
	if err != nil {
		return nil, false, err
	}
	return rec, published, nil
}
