// Package storetest plants Domain Store records for the tests of the
// store's callers (the Host Coordinator's role packages): records a newer
// Lazaret build wrote, which this build must refuse to act on, and a
// reopened store as a new coordinator of the Domain sees it. It writes the
// store's pebble directly, by the key schema of package store's doc, while
// the store is closed; production code never imports it.
package storetest

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/store"
)

// Reopen closes st and opens the Domain Store of domainRoot again with
// lock, as the next coordinator of the Domain does.
func Reopen(t testing.TB, st *store.Store, domainRoot string, lock *os.File) *store.Store {
	t.Helper()
	id := st.Domain()
	if err := st.Close(); err != nil {
		t.Fatalf("storetest: close: %v", err)
	}
	next, err := store.Open(domainRoot, lock, id, store.Options{Logger: discard})
	if err != nil {
		t.Fatalf("storetest: reopen: %v", err)
	}
	t.Cleanup(func() { next.Close() })
	return next
}

// NewerParticipant closes st, rewrites generation gen's role record as a
// newer build writes it (record_version one past the record's), and
// reopens the store.
func NewerParticipant(t testing.TB, st *store.Store, domainRoot string, lock *os.File, gen uint64, role participant.Role) *store.Store {
	t.Helper()
	key := append(append(append([]byte("p/"), genBytes(gen)...), '/'), role...)
	return newer(t, st, domainRoot, lock, key, &lv1.ParticipantRecordV1{}, func(m proto.Message) {
		r := m.(*lv1.ParticipantRecordV1)
		r.RecordVersion++
	})
}

// NewerSessionTerminal is NewerParticipant for generation gen's Session
// Terminal record of session id.
func NewerSessionTerminal(t testing.TB, st *store.Store, domainRoot string, lock *os.File, gen uint64, id string) *store.Store {
	t.Helper()
	key := append(append(append([]byte("t/"), genBytes(gen)...), '/'), id...)
	return newer(t, st, domainRoot, lock, key, &lv1.SessionTerminalRecordV1{}, func(m proto.Message) {
		r := m.(*lv1.SessionTerminalRecordV1)
		r.RecordVersion++
	})
}

func newer(t testing.TB, st *store.Store, domainRoot string, lock *os.File, key []byte, rec proto.Message, bump func(proto.Message)) *store.Store {
	t.Helper()
	id := st.Domain()
	if err := st.Close(); err != nil {
		t.Fatalf("storetest: close: %v", err)
	}
	db, err := pebble.Open(filepath.Join(domainRoot, store.Dir), &pebble.Options{FormatMajorVersion: store.FormatMajorVersion, Logger: quiet{}})
	if err != nil {
		t.Fatalf("storetest: open pebble: %v", err)
	}
	v, closer, err := db.Get(key)
	if err != nil {
		db.Close()
		t.Fatalf("storetest: record %q: %v", key, err)
	}
	err = proto.Unmarshal(v, rec)
	closer.Close()
	if err != nil {
		db.Close()
		t.Fatalf("storetest: record %q: %v", key, err)
	}
	bump(rec)
	b, err := proto.Marshal(rec)
	if err == nil {
		err = db.Set(key, b, pebble.Sync)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("storetest: rewrite %q: %v", key, err)
	}
	next, err := store.Open(domainRoot, lock, id, store.Options{Logger: discard})
	if err != nil {
		t.Fatalf("storetest: reopen: %v", err)
	}
	t.Cleanup(func() { next.Close() })
	return next
}

var discard = slog.New(slog.DiscardHandler)

// quiet is pebble's logger for the rewrite: its replay notes are noise in
// a test's output; a fatal error still stops the test binary.
type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("storetest: pebble: "+format, args...))
}

func genBytes(gen uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], gen)
	return b[:]
}
