package publication

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/trust"
)

// TestServerUsesTheSocketsTLS: a connection accepted on the control socket
// is served with the configuration the role was given (the Trust Anchor's
// server side): a client pinning the anchor's publication completes the
// handshake; a client that does not trust the anchor fails it.
func TestServerUsesTheSocketsTLS(t *testing.T) {
	coord, _ := trust.NewID(nil)
	sandboxID, _ := trust.NewID(nil)
	a, err := trust.NewAnchor(trust.GenerationIdentity{DomainID: string(domain.DeriveID("default", "/w")), Generation: 1, CoordinatorID: coord,
		Profile: "default", ConfigFingerprint: "sha256:" + strings.Repeat("0", 64)}, sandboxID, trust.Options{})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := a.ServerTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{TLS: serverTLS})
	handshake := func(client *tls.Config) error {
		sc, cc := net.Pipe()
		defer sc.Close()
		defer cc.Close()
		go s.Server(sc).Handshake()
		cc.SetDeadline(time.Now().Add(10 * time.Second))
		return tls.Client(cc, client).Handshake()
	}
	pinned, err := trust.ClientTLSConfig(a.Publication(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(pinned); err != nil {
		t.Fatalf("a client pinning the anchor: %v", err)
	}
	if err := handshake(&tls.Config{MinVersion: tls.VersionTLS13, ServerName: "lazaret"}); err == nil {
		t.Fatal("a client that does not trust the anchor completed the handshake")
	}
}
