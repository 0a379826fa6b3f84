// Package record is the signed record envelope of the Escalation Mailbox
// (spec §3.7): one protobuf payload (api/lazaret/v1/escalation.proto) with
// one Ed25519 signature, framed as
//
//	"LZE1" | kind (1 byte) | payload length (uint32 BE) | payload | signature (64 bytes)
//
// A complete record is at most MaxRecordBytes. The signature covers
// "lazaret/v1/" + the kind's lower-kebab record name + the uint64 BE payload
// length + the payload (trust.SignedMessage), so a signature over one record
// kind never verifies as another. Open checks the frame and verifies the
// signature with the key the caller expects for that kind before the payload
// is parsed; nothing in a record (and nothing about the file that carried
// it) is trusted before that.
//
// The package is shared by the in-sandbox Escalation Client and the Host
// Coordinator, so it links nothing host-side.
package record

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Bounds (spec §3.7).
const (
	// MaxRecordBytes bounds a complete record (frame, payload, signature).
	MaxRecordBytes = 65536
	// MaxChunkData bounds the output bytes of one result chunk.
	MaxChunkData = 49152
	// MaxUnacked is the number of unacknowledged chunks the coordinator
	// retains per request before it pauses the host process's pipes.
	MaxUnacked = 8

	magic     = "LZE1"
	headerLen = len(magic) + 1 + 4
	sigLen    = ed25519.SignatureSize
)

// Kind is a record kind.
type Kind byte

// Record kinds.
const (
	KindRequest      Kind = 1
	KindCancellation Kind = 2
	KindAck          Kind = 3
	KindDecision     Kind = 4
	KindChunk        Kind = 5
	KindResult       Kind = 6
)

// Name is the lower-kebab record name that domain-separates signatures.
func (k Kind) Name() string {
	switch k {
	case KindRequest:
		return "escalation-request"
	case KindCancellation:
		return "escalation-cancellation"
	case KindAck:
		return "escalation-ack"
	case KindDecision:
		return "developer-decision"
	case KindChunk:
		return "result-chunk"
	case KindResult:
		return "escalation-result"
	}
	return ""
}

func (k Kind) String() string {
	if n := k.Name(); n != "" {
		return n
	}
	return fmt.Sprintf("record-kind-%d", byte(k))
}

// Signer signs a record message (trust.SignedMessage bytes).
type Signer func(name string, payload []byte) ([]byte, error)

// KeySigner signs with an Ed25519 private key.
func KeySigner(key ed25519.PrivateKey) Signer {
	return func(name string, payload []byte) ([]byte, error) { return trust.Sign(key, name, payload), nil }
}

// Seal encodes m as a record of kind k signed by sign.
func Seal(k Kind, m proto.Message, sign Signer) ([]byte, error) {
	if k.Name() == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "unknown record kind %d", byte(k))
	}
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", k, err)
	}
	if headerLen+len(payload)+sigLen > MaxRecordBytes {
		return nil, errdefs.New(errdefs.ErrInvalid, "%s of %d bytes exceeds the %d-byte record bound", k, headerLen+len(payload)+sigLen, MaxRecordBytes)
	}
	sig, err := sign(k.Name(), payload)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", k, err)
	}
	if len(sig) != sigLen {
		return nil, errdefs.New(errdefs.ErrInvalid, "%s signature is %d bytes, not %d", k, len(sig), sigLen)
	}
	out := make([]byte, 0, headerLen+len(payload)+sigLen)
	out = append(out, magic...)
	out = append(out, byte(k))
	out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	return append(out, sig...), nil
}

// Frame is a record whose frame is well-formed but whose signature is not
// yet verified.
type Frame struct {
	Kind      Kind
	Payload   []byte
	Signature []byte
}

// Split checks the frame of b (magic, known kind, exact length, bound) and
// returns its parts, aliasing b. It does not verify or parse anything.
func Split(b []byte) (Frame, error) {
	if len(b) > MaxRecordBytes {
		return Frame{}, errdefs.New(errdefs.ErrRefused, "record of %d bytes exceeds %d", len(b), MaxRecordBytes)
	}
	if len(b) < headerLen+sigLen || string(b[:len(magic)]) != magic {
		return Frame{}, errdefs.New(errdefs.ErrRefused, "not an escalation record (%d bytes, bad header)", len(b))
	}
	k := Kind(b[len(magic)])
	if k.Name() == "" {
		return Frame{}, errdefs.New(errdefs.ErrRefused, "unknown record kind %d", byte(k))
	}
	n := binary.BigEndian.Uint32(b[len(magic)+1:])
	if uint64(n) != uint64(len(b)-headerLen-sigLen) {
		return Frame{}, errdefs.New(errdefs.ErrRefused, "%s length field %d does not match the %d payload bytes present (truncated or padded)", k, n, len(b)-headerLen-sigLen)
	}
	return Frame{Kind: k, Payload: b[headerLen : headerLen+int(n)], Signature: b[headerLen+int(n):]}, nil
}

// Open checks b's frame, requires kind want, verifies the signature with
// pub and only then parses the payload into m.
func Open(b []byte, want Kind, pub ed25519.PublicKey, m proto.Message) error {
	f, err := Split(b)
	if err != nil {
		return err
	}
	if f.Kind != want {
		return errdefs.New(errdefs.ErrRefused, "record is a %s, expected a %s", f.Kind, want)
	}
	if err := trust.Verify(pub, want.Name(), f.Payload, f.Signature); err != nil {
		return err
	}
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(f.Payload, m); err != nil {
		return errdefs.Mark(fmt.Errorf("decode %s: %w", want, err), errdefs.ErrCorrupt)
	}
	return nil
}

// VerifyDecision verifies a SignedDecision with the session's anchor key
// before parsing it.
func VerifyDecision(sd *lv1.SignedDecision, anchor ed25519.PublicKey) (*lv1.DeveloperDecision, error) {
	if sd == nil || len(sd.Payload) > MaxRecordBytes {
		return nil, errdefs.New(errdefs.ErrRefused, "malformed developer decision")
	}
	if err := trust.Verify(anchor, KindDecision.Name(), sd.Payload, sd.Signature); err != nil {
		return nil, errdefs.New(errdefs.ErrRefused, "developer decision is not signed by the requesting session's Session Anchor")
	}
	var d lv1.DeveloperDecision
	if err := proto.Unmarshal(sd.Payload, &d); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("decode developer decision: %w", err), errdefs.ErrCorrupt)
	}
	return &d, nil
}

// SignDecision returns d signed by sign (the CLI's Session Anchor).
func SignDecision(d *lv1.DeveloperDecision, sign Signer) (*lv1.SignedDecision, error) {
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil {
		return nil, err
	}
	sig, err := sign(KindDecision.Name(), payload)
	if err != nil {
		return nil, err
	}
	return &lv1.SignedDecision{Payload: payload, Signature: sig}, nil
}
