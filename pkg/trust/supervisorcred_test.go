package trust

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// TestSupervisorCredentialFileRoundTrip: what the coordinator writes, RS
// reads back field for field; a malformed file or a key of the wrong size
// is ErrCorrupt, naming the sizes.
func TestSupervisorCredentialFileRoundTrip(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	in := SupervisorCredentialFile{KeySeed: key.Seed(), CoordinatorPublicKey: pub, DomainID: "d", Generation: 7, StorageRoot: "/s", ImageRef: "img"}
	out, err := ParseSupervisorCredentialFile(in.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if string(out.KeySeed) != string(in.KeySeed) || string(out.CoordinatorPublicKey) != string(in.CoordinatorPublicKey) ||
		out.DomainID != "d" || out.Generation != 7 || out.StorageRoot != "/s" || out.ImageRef != "img" {
		t.Fatalf("round trip: %+v", out)
	}
	short := in
	short.KeySeed = short.KeySeed[:5]
	for name, raw := range map[string][]byte{"not json": []byte("{"), "short seed": short.Marshal(), "no coordinator key": (SupervisorCredentialFile{KeySeed: key.Seed()}).Marshal()} {
		if _, err := ParseSupervisorCredentialFile(raw); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
