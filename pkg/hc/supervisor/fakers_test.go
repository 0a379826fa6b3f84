package supervisor

// The fake Runtime Supervisor: this test binary, launched by the real
// broker through Driver exactly as lazaret-rs is (new user, mount and
// network namespaces, the same descriptors), in the mode fakeEnv names.
// It reports what it received in one Progress line, sends a
// StagedProcessOwnership signed with the key its credential carries, and
// then obeys or ignores StopSandbox; it exits 3 when its lifetime pipe
// reaches EOF.

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/trust"
)

const (
	fakeEnv    = "LAZARET_SUPERVISOR_FAKE_RS"
	fakeObey   = "obey"   // StopSandbox → SupervisorStopped, exit 0
	fakeIgnore = "ignore" // StopSandbox and SIGTERM ignored
	// exitLifetime is the fake's status when its lifetime pipe ends.
	exitLifetime = 3
)

func TestMain(m *testing.M) {
	proc.MaybeRunWrapperInPlace() // the broker's barrier re-executes the test binary; RS goes on in place
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeRS(mode))
	}
	os.Exit(m.Run())
}

func fakeRS(mode string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "fake rs:", err)
		return 2
	}
	ch, err := fdpass.FromFD(3)
	if err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(5, unix.F_GETFD, 0); err != nil {
		return fail(fmt.Errorf("lock descriptor: %w", err))
	}
	policy, err := fdpass.ReadSealedMemfd(6, 1<<20)
	if err != nil {
		return fail(err)
	}
	raw, err := fdpass.ReadSealedMemfd(7, 1<<20)
	if err != nil {
		return fail(err)
	}
	cred, err := trust.ParseSupervisorCredentialFile(raw)
	if err != nil {
		return fail(fmt.Errorf("credential: %v", err))
	}
	go func() {
		var b [1]byte
		os.NewFile(4, "lifetime").Read(b[:])
		os.Exit(exitLifetime)
	}()
	if mode == fakeIgnore {
		signal.Ignore(syscall.SIGTERM)
	}
	ctx := context.Background()
	send := func(m *lv1.SupervisorMessage) {
		if err := ch.Send(ctx, m); err != nil {
			time.Sleep(time.Hour) // the channel is gone: the lifetime pipe decides
		}
	}
	send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Progress{Progress: &lv1.Progress{
		Message: fmt.Sprintf("uid=%d policy=%s domain=%s generation=%d image=%s", os.Getuid(), policy, cred.DomainID, cred.Generation, cred.ImageRef)}}})
	staged, err := supervisortest.Sign(ed25519.NewKeyFromSeed(cred.KeySeed), &lv1.StagedProcessOwnership{
		DomainId: cred.DomainID, Generation: cred.Generation, Slot: "attached_runsc",
		Identity: &lv1.PidfsProcessIdentityV1{BootId: make([]byte, 16), PidfsStDev: 5, PidfsStIno: 9, HostPid: 42}})
	if err != nil {
		return fail(err)
	}
	send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Staged{Staged: staged}})
	for {
		var m lv1.CoordinatorMessage
		if err := ch.Recv(ctx, &m); err != nil {
			time.Sleep(time.Hour) // the lifetime pipe decides
		}
		if m.GetStop() != nil && mode == fakeObey {
			send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Stopped{Stopped: &lv1.SupervisorStopped{}}})
			return 0
		}
	}
}
