// Package pebbleguard turns pebble's endless retry of a failed flush or
// compaction into the database's fatal error.
//
// Pebble retries a flush that failed at once and for ever (pebble v2.1's
// flush loop has no backoff) while every write that needs memtable space,
// and DB.Flush and DB.Close, wait for it. Measured on a full filesystem: a
// Host Coordinator whose Domain store or Storage Catalog had to flush spun
// a CPU creating and unlinking tables (over a hundred thousand a minute),
// never finished its teardown and kept the Domain lock and the catalog's
// lock, so every later `lazaret run` of that Domain, and every start that
// needed the catalog, waited out its timeout. A write-ahead log that
// cannot be written is already fatal in pebble (Logger.Fatalf); a table
// that cannot be written is made so here, through the same Fatalf, so the
// process ends (fail-closed: the next `lazaret run` recovers the
// generation) and releases its locks.
package pebbleguard

import (
	"errors"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

// Listener is an event listener that calls log.Fatalf when a flush or a
// compaction fails with an operating-system error (ENOSPC, EDQUOT, EIO,
// EROFS, …). Other failures (a compaction cancelled by a concurrent
// operation, an empty flush) are pebble's to handle and pass.
func Listener(log pebble.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		FlushEnd:      func(info pebble.FlushInfo) { fatalOnOSError(log, "flush", info.Err) },
		CompactionEnd: func(info pebble.CompactionInfo) { fatalOnOSError(log, "compaction", info.Err) },
	}
}

// OSError reports whether err is, or wraps, an operating-system error.
func OSError(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno)
}

func fatalOnOSError(log pebble.Logger, what string, err error) {
	if OSError(err) {
		log.Fatalf("%s failed and would be retried for ever: %v", what, err)
	}
}
