package prepared

import (
	"errors"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// TestReadPreparerResult: the supervisor takes the preparer's artifact only
// when its ID is the one its manifest digest names; it keeps the category
// of the preparer's error, and refuses a result it cannot read.
func TestReadPreparerResult(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	id := ArtifactID(digest)
	for _, tc := range []struct {
		name, in string
		wantErr  error  // category, when an error is expected
		wantText string // in the error
	}{
		{name: "artifact", in: `{"version":1,"artifact_id":"` + id + `","manifest_digest":"` + digest + `"}` + "\n"},
		{name: "error", in: `{"version":1,"error":"prepare oci:/x: no space left","category":"unavailable"}`, wantErr: errdefs.ErrUnavailable, wantText: "no space left"},
		{name: "uncategorised error", in: `{"version":1,"error":"boom"}`, wantErr: errdefs.ErrInternal, wantText: "boom"},
		{name: "empty", in: ``, wantErr: errdefs.ErrInternal, wantText: "without a result"},
		{name: "garbage", in: `not json`, wantErr: errdefs.ErrCorrupt, wantText: "result"},
		{name: "newer", in: `{"version":2,"artifact_id":"` + id + `","manifest_digest":"` + digest + `"}`, wantErr: errdefs.ErrRefused, wantText: "reinstall"},
		{name: "no version", in: `{"artifact_id":"` + id + `","manifest_digest":"` + digest + `"}`, wantErr: errdefs.ErrRefused, wantText: "version 0"},
		{name: "mismatched id", in: `{"version":1,"artifact_id":"pl-00000000000000000000000000000000","manifest_digest":"` + digest + `"}`, wantErr: errdefs.ErrCorrupt, wantText: "names artifact"},
	} {
		gotID, gotDigest, err := ReadPreparerResult(strings.NewReader(tc.in))
		if tc.wantErr == nil {
			if err != nil || gotID != id || gotDigest != digest {
				t.Errorf("%s: got %q %q %v", tc.name, gotID, gotDigest, err)
			}
			continue
		}
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText) {
			t.Errorf("%s: err = %v, want %v containing %q", tc.name, err, tc.wantErr, tc.wantText)
		}
	}
}
