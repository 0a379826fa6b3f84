package preparedlower

import (
	"context"

	"github.com/lazaret/lazaret/pkg/ocilayout"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
)

// ReuseVerdict is the prepared artifact of the configured image that a
// start may reuse as it is, as the Storage Catalog records it
// (StartSandbox.reusable_artifact_id): its ID when the record is
// Published, "" otherwise — no record, a preparation or a reclamation to
// settle, an image whose manifest digest is not known without the image
// library (ocilayout.ReuseDigest, as RS reads it) — and RS then runs the
// preparer, which settles it. The catalog is read here, not in RS, so
// that RS links no database library; the lease (recordLease) checks
// Published again under the catalog's lock before anything is mounted.
func (s *Service) ReuseVerdict(ctx context.Context) string {
	d, err := ocilayout.ReuseDigest(s.cfg.Image)
	if err != nil {
		s.log.Debug("no reuse without the preparer", "image_ref", s.cfg.Image, "why", err)
		return ""
	}
	id := prepared.ArtifactID(d)
	cat, err := s.catalog()
	if err == nil {
		var published bool
		if published, err = preparedcatalog.Published(ctx, cat, id); err == nil && published {
			return id
		}
	}
	s.log.Debug("the Storage Catalog records no Published prepared lower; RS runs the preparer", "image_ref", s.cfg.Image, "artifact_id", id, "err", err)
	return ""
}
