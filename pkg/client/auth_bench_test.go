package client

import (
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/trust"
)

// BenchmarkAuthenticate measures a CLI's authentication with a coordinator:
// reading and verifying the publication, enrolling on a certificate-less
// TLS connection and the mutual-TLS handshake with the issued leaf.
func BenchmarkAuthenticate(b *testing.B) {
	roots := newRoots(b)
	co := startCoordinator(b, roots, "/ws", func(*trust.Anchor, *control.Conn, *lv1.ClientFrame, *trust.ClientIdentity) {})
	for b.Loop() {
		raw, err := Dial(co.paths)
		if err != nil {
			b.Fatal(err)
		}
		c, err := Authenticate(raw, co.paths, testProfile)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
