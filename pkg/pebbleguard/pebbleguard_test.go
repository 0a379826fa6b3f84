package pebbleguard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// exitLogger's Fatalf ends the process with status 3, as the store's and
// the catalog's end the coordinator.
type exitLogger struct{}

func (exitLogger) Infof(string, ...any)  {}
func (exitLogger) Errorf(string, ...any) {}
func (exitLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FATAL: "+format+"\n", args...)
	os.Exit(3)
}

const childEnv = "PEBBLEGUARD_TEST_CHILD"

// TestMain runs the child's part of TestFullFilesystemEndsTheProcess.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		flushOnFullFilesystem(dir)
		fmt.Fprintln(os.Stderr, "the flush returned")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// flushOnFullFilesystem writes to a database whose tables cannot be
// created (ENOSPC, injected) and flushes it: pebble retries the failed
// flush for ever and Flush waits for it, unless the guard ends the process.
func flushOnFullFilesystem(dir string) {
	full := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") {
			return &os.PathError{Op: "open", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})
	db, err := pebble.Open(dir, &pebble.Options{FS: errorfs.Wrap(vfs.Default, full), Logger: exitLogger{}, EventListener: Listener(exitLogger{})})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		fmt.Fprintln(os.Stderr, "set:", err)
		os.Exit(1)
	}
	db.Flush()
}

// TestFullFilesystemEndsTheProcess: a flush that fails on a full
// filesystem ends the process through Fatalf at once, instead of being
// retried for ever.
func TestFullFilesystemEndsTheProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), childEnv+"="+t.TempDir())
	var stderr strings.Builder
	c.Stderr = &stderr
	err := c.Run()
	if ctx.Err() != nil {
		t.Fatalf("the process still retried the flush after 30 s:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(stderr.String(), "FATAL: flush failed and would be retried for ever") || !strings.Contains(stderr.String(), "no space left on device") {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
}

func TestOSError(t *testing.T) {
	wrapped := fmt.Errorf("flush: %w", &os.PathError{Op: "write", Path: "x.sst", Err: syscall.EIO})
	if !OSError(wrapped) || OSError(errors.New("pebble: empty table")) || OSError(nil) {
		t.Error("OSError misclassifies")
	}
}
