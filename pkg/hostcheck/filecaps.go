package hostcheck

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// Capability bits newuidmap and newgidmap need when they are not setuid
// root: Fedora's shadow-utils ships them 0755 with cap_setuid=ep and
// cap_setgid=ep instead (capabilities(7)).
const (
	capSetgid = 6
	capSetuid = 7
)

// realFileCaps reads path's permitted file capabilities from its
// security.capability attribute; none is 0.
func realFileCaps(path string) (uint64, error) {
	buf := make([]byte, 64)
	n, err := unix.Getxattr(path, "security.capability", buf)
	if errors.Is(err, unix.ENODATA) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseFileCaps(buf[:n])
}

// Layout of struct vfs_cap_data (linux/capability.h).
const (
	vfsCapRevisionMask = 0xff000000
	vfsCapRevision1    = 0x01000000 // 32-bit sets, 12 bytes
	vfsCapRevision2    = 0x02000000 // 64-bit sets, 20 bytes
	vfsCapRevision3    = 0x03000000 // revision 2 plus the namespace root uid, 24 bytes
)

var errFileCaps = errors.New("malformed security.capability attribute")

// parseFileCaps returns the permitted set of a security.capability value.
// Revision 3 capabilities apply only in a user namespace whose root is
// their root uid, so on the host they count only for root uid 0.
func parseFileCaps(b []byte) (uint64, error) {
	if len(b) < 4 {
		return 0, errFileCaps
	}
	magic := binary.LittleEndian.Uint32(b)
	switch magic & vfsCapRevisionMask {
	case vfsCapRevision1:
		if len(b) < 12 {
			return 0, errFileCaps
		}
		return uint64(binary.LittleEndian.Uint32(b[4:])), nil
	case vfsCapRevision2, vfsCapRevision3:
		if len(b) < 20 {
			return 0, errFileCaps
		}
		if magic&vfsCapRevisionMask == vfsCapRevision3 && (len(b) < 24 || binary.LittleEndian.Uint32(b[20:]) != 0) {
			return 0, nil
		}
		return uint64(binary.LittleEndian.Uint32(b[4:])) | uint64(binary.LittleEndian.Uint32(b[12:]))<<32, nil
	}
	return 0, errFileCaps
}

// hasFileCap reports whether path carries capability bit as a permitted
// file capability (false when the probe is absent or fails).
func (h Host) hasFileCap(path string, bit uint) bool {
	if h.FileCaps == nil {
		return false
	}
	caps, err := h.FileCaps(path)
	return err == nil && caps&(1<<bit) != 0
}
