package record

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/trust"
)

func keys(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func sealed(t testing.TB, priv ed25519.PrivateKey) []byte {
	b, err := Seal(KindRequest, &lv1.EscalationRequest{RequestId: "00112233445566778899aabbccddeeff", Generation: 3, Argv: []string{"git", "fetch"}}, KeySigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSealOpenRoundTrip(t *testing.T) {
	pub, priv := keys(t)
	b := sealed(t, priv)
	var m lv1.EscalationRequest
	if err := Open(b, KindRequest, pub, &m); err != nil {
		t.Fatal(err)
	}
	if m.Generation != 3 || len(m.Argv) != 2 || m.Argv[1] != "fetch" {
		t.Errorf("round trip: %v", &m)
	}
}

func TestOpenRefuses(t *testing.T) {
	pub, priv := keys(t)
	other, _ := keys(t)
	good := sealed(t, priv)
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	cases := map[string]struct {
		b    []byte
		kind Kind
		pub  ed25519.PublicKey
	}{
		"forged signature":       {flip(len(good) - 1), KindRequest, pub},
		"payload changed":        {flip(headerLen + 2), KindRequest, pub},
		"another key":            {good, KindRequest, other},
		"another kind expected":  {good, KindAck, pub},
		"kind byte changed":      {func() []byte { b := bytes.Clone(good); b[4] = byte(KindAck); return b }(), KindAck, pub},
		"truncated":              {good[:len(good)-1], KindRequest, pub},
		"padded":                 {append(bytes.Clone(good), 0), KindRequest, pub},
		"empty":                  {nil, KindRequest, pub},
		"bad magic":              {flip(0), KindRequest, pub},
		"unknown kind":           {func() []byte { b := bytes.Clone(good); b[4] = 99; return b }(), KindRequest, pub},
		"oversize":               {make([]byte, MaxRecordBytes+1), KindRequest, pub},
		"length field too large": {flip(headerLen - 2), KindRequest, pub},
	}
	for name, c := range cases {
		var m lv1.EscalationRequest
		err := Open(c.b, c.kind, c.pub, &m)
		if err == nil || !errors.Is(err, errdefs.ErrRefused) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}

// A signature over one record name never verifies as another (domain
// separation by "lazaret/v1/" + name + length).
func TestDomainSeparation(t *testing.T) {
	pub, priv := keys(t)
	payload := []byte{1, 2, 3}
	sig := trust.Sign(priv, KindAck.Name(), payload)
	if trust.Verify(pub, KindCancellation.Name(), payload, sig) == nil {
		t.Error("an ack signature verified as a cancellation")
	}
}

func TestSealBound(t *testing.T) {
	_, priv := keys(t)
	_, err := Seal(KindChunk, &lv1.ResultChunk{Data: make([]byte, MaxRecordBytes)}, KeySigner(priv))
	if err == nil {
		t.Error("a record over the bound was sealed")
	}
	if _, err := Seal(KindChunk, &lv1.ResultChunk{RequestId: "00112233445566778899aabbccddeeff", Generation: 1 << 40, Sequence: 1 << 40, Stream: 2, Data: make([]byte, MaxChunkData)}, KeySigner(priv)); err != nil {
		t.Errorf("a full chunk does not fit a record: %v", err)
	}
}

func TestDecisionSignedByAnchor(t *testing.T) {
	anchor, err := trust.NewSessionAnchor(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := trust.NewSessionAnchor(nil)
	d := &lv1.DeveloperDecision{RequestId: "r", SessionId: anchor.SessionID, Decision: lv1.DecisionKind_DECISION_KIND_APPROVE, ApprovedArgv: []string{"make"}}
	sd, err := SignDecision(d, func(n string, p []byte) ([]byte, error) { return other.Sign(n, p), nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDecision(sd, anchor.Public()); err == nil {
		t.Error("a decision signed by another session's anchor verified")
	}
	sd, _ = SignDecision(d, func(n string, p []byte) ([]byte, error) { return anchor.Sign(n, p), nil })
	got, err := VerifyDecision(sd, anchor.Public())
	if err != nil || got.ApprovedArgv[0] != "make" {
		t.Errorf("own anchor: %v %v", got, err)
	}
	sd.Payload = append(sd.Payload, 0x2a, 1, 'x') // an extra argv element
	if _, err := VerifyDecision(sd, anchor.Public()); err == nil {
		t.Error("an altered approved argv verified")
	}
}

func TestQuoteAndParseArgv(t *testing.T) {
	if got := QuoteArgv([]string{"git", "commit", "-m", "a b", "x\x1b[2Jy", "it's", ""}); got != `'git' 'commit' '-m' 'a b' "x\x1b[2Jy" "it's" ""` {
		t.Errorf("QuoteArgv: %s", got)
	}
	for line, want := range map[string][]string{
		`echo 'a b' "c \"d\"" e\ f; ls | x $HOME`: {"echo", "a b", `c "d"`, "e f;", "ls", "|", "x", "$HOME"},
		"  make   lint ": {"make", "lint"},
		`''`:             {""},
	} {
		got, err := ParseArgv(line)
		if err != nil || len(got) != len(want) {
			t.Errorf("ParseArgv(%q) = %q, %v; want %q", line, got, err, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("ParseArgv(%q)[%d] = %q, want %q", line, i, got[i], want[i])
			}
		}
	}
	for _, bad := range []string{"", "   ", `'open`, `"open`, `trail\`} {
		if _, err := ParseArgv(bad); err == nil {
			t.Errorf("ParseArgv(%q) accepted", bad)
		}
	}
	if CheckArgv([]string{"a\x00b"}) == nil || CheckArgv(nil) == nil || CheckArgv([]string{""}) == nil {
		t.Error("CheckArgv accepted a NUL byte or an empty program")
	}
}

// FuzzOpen: the record decoder never panics, never accepts a record the key
// did not sign, and never allocates beyond the bound.
func FuzzOpen(f *testing.F) {
	pub, priv := keys(f)
	good := sealed(f, priv)
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte("LZE1\x01\x00\x00\x00\x00"))
	f.Add(append([]byte("LZE1\x06\x00\x00\x00\x02\x08\x01"), make([]byte, 64)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Split(b); err == nil && len(b) > MaxRecordBytes {
			t.Fatal("Split accepted an oversize record")
		}
		for _, k := range []Kind{KindRequest, KindCancellation, KindAck, KindChunk, KindResult} {
			var m lv1.EscalationRequest
			err := Open(b, k, pub, &m)
			if err == nil && !bytes.Equal(b, good) {
				// Only records signed by priv verify; the fuzzer cannot
				// sign, so any other accepted input is a forgery.
				t.Fatalf("accepted an unsigned record %x as %s", b, k)
			}
		}
	})
}
