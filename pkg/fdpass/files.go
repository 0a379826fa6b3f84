package fdpass

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// FilesPair is a SEQPACKET socketpair for one message that carries
// descriptors (SendFiles, RecvFiles): the first end is kept, the second
// handed to a child. Both are close-on-exec until the spawner lists the
// second in the child's files.
func FilesPair() (mine, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "files-pair"), os.NewFile(uintptr(fds[1]), "files-pair-peer"), nil
}

// SendFiles sends data and files as one message on the SEQPACKET socket
// conn. A peer that is gone is an error (EPIPE), not a signal.
func SendFiles(conn *os.File, data []byte, files ...*os.File) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err := unix.Sendmsg(int(conn.Fd()), data, oob, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("sendmsg", err)
		}
		return nil
	}
}

// RecvFiles reads one message of at most max bytes carrying at most n
// descriptors from the SEQPACKET socket fd. The descriptors are
// close-on-exec. io.EOF means the peer closed the socket without sending
// one; a truncated message or one with more descriptors is refused (its
// descriptors closed).
func RecvFiles(fd, max, n int) ([]byte, []int, error) {
	buf := make([]byte, max+1)
	oob := make([]byte, unix.CmsgSpace(n*4))
	for {
		got, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, os.NewSyscallError("recvmsg", err)
		}
		if got == 0 && oobn == 0 {
			return nil, nil, io.EOF
		}
		fds, perr := rights(oob[:oobn])
		if perr == nil && (flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || got > max) {
			perr = errors.New("the message was truncated (too large, or too many descriptors)")
		}
		if perr != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, nil, perr
		}
		return buf[:got], fds, nil
	}
}

// rights are the descriptors of a message's control data.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("the message's descriptors: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("the message's descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// CloseAll closes received descriptors.
func CloseAll(fds []int) {
	for _, f := range fds {
		unix.Close(f)
	}
}
