package catalog

import (
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// migrations is the ordered list of schema migrations.
var migrations = []migration{
	{from: 1, to: 2, name: "v1-to-v2-preparer-records", apply: migrateV1toV2},
}

// migrateV1toV2 rewrites every record of schema 1 with record_version 2.
// Schema-1 artifact records were registered by a coordinator on first lease
// (origin REGISTERED_V1); their source_identity was the manifest digest RS
// reported, which becomes manifest_digest when it is one. Leases and
// operations keep their meaning.
func migrateV1toV2(tx *Tx) error {
	b, ok := tx.r.(*pebble.Batch)
	if !ok {
		return errdefs.New(errdefs.ErrInternal, "storage catalog: migration without a batch")
	}
	type rec interface {
		proto.Message
		GetRecordVersion() uint32
	}
	for _, p := range []struct {
		prefix string
		fresh  func() rec
		fix    func(rec)
	}{
		{prefixArtifact, func() rec { return &v1.PreparedArtifactRecordV1{} }, func(r rec) {
			a := r.(*v1.PreparedArtifactRecordV1)
			a.RecordVersion, a.Origin = 2, OriginRegisteredV1
			if s := a.GetSourceIdentity(); strings.HasPrefix(s, "sha256:") {
				a.ManifestDigest = s
			}
		}},
		{prefixOperation, func() rec { return &v1.PreparationOperationRecordV1{} }, func(r rec) { r.(*v1.PreparationOperationRecordV1).RecordVersion = 2 }},
		{prefixLease, func() rec { return &v1.PreparedLowerLeaseRecordV1{} }, func(r rec) { r.(*v1.PreparedLowerLeaseRecordV1).RecordVersion = 2 }},
	} {
		var keys [][]byte
		var vals []rec
		if err := tx.scan([]byte(p.prefix), func(k, v []byte) error {
			r := p.fresh()
			if err := proto.Unmarshal(v, r); err != nil {
				return corrupt("record %q: %v", k, err)
			}
			if r.GetRecordVersion() != 1 {
				return corrupt("schema-1 record %q has record_version %d", k, r.GetRecordVersion())
			}
			p.fix(r)
			keys, vals = append(keys, k), append(vals, r)
			return nil
		}); err != nil {
			return err
		}
		for i, k := range keys {
			if err := b.Set(k, mustMarshal(vals[i]), nil); err != nil {
				return err
			}
		}
	}
	return nil
}
