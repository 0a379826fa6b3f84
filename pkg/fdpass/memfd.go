package fdpass

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// requiredSeals make a memfd immutable: no write, grow or shrink, and no
// seal change.
const requiredSeals = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL

// SealedMemfd returns a memfd holding data, sealed against any change, to
// hand to a child as an inherited descriptor.
func SealedMemfd(name string, data []byte) (*os.File, error) {
	f, err := SealableMemfd(name)
	if err != nil {
		return nil, err
	}
	if err := FillAndSeal(f, data); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// SealableMemfd returns an empty memfd that FillAndSeal fills and seals
// later: a child may inherit it before its contents are known, provided
// the child reads it only after the parent sealed it (ReadSealedMemfd
// refuses it unsealed).
func SealableMemfd(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// FillAndSeal writes data to the memfd f and seals it against any change.
func FillAndSeal(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("fill memfd %s: %w", f.Name(), err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, requiredSeals); err != nil {
		return os.NewSyscallError("F_ADD_SEALS", err)
	}
	return nil
}

// ReadSealedMemfd verifies that fd is a memfd carrying every required seal
// and reads it whole (bounded by max).
func ReadSealedMemfd(fd int, max int64) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("inherited fd %d is not a sealable memfd: %w", fd, err), errdefs.ErrRefused)
	}
	if seals&requiredSeals != requiredSeals {
		return nil, errdefs.New(errdefs.ErrRefused, "inherited memfd %d is not write-sealed (seals %#x)", fd, seals)
	}
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "sealed-memfd")
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errdefs.New(errdefs.ErrRefused, "sealed memfd larger than %d bytes", max)
	}
	return b, nil
}
