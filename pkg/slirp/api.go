package slirp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// APISocketName is the helper's API socket in the Domain's runtime
// directory (0700): whoever can connect can add forwards.
const APISocketName = "slirp.sock"

// maxSocketPath is the longest unix socket path (sun_path less its NUL).
const maxSocketPath = 107

// HostFwd is one TCP host forwarding of the helper: connections to
// HostAddr:HostPort in the host network namespace reach GuestAddr:GuestPort
// on the tap (the sandbox's address in gVisor's netstack).
type HostFwd struct {
	HostAddr  netip.Addr
	HostPort  uint16
	GuestAddr netip.Addr
	GuestPort uint16
}

// apiTimeout bounds one API request.
var apiTimeout = 5 * time.Second

type apiRequest struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

type apiResponse struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Desc string `json:"desc"`
	} `json:"error"`
}

// call sends one request on a fresh connection; slirp4netns answers and
// closes it.
func call(ctx context.Context, socket string, req apiRequest, ret any) error {
	if len(socket) > maxSocketPath {
		return fmt.Errorf("connectivity helper API socket path %s is longer than %d bytes", socket, maxSocketPath)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("connectivity helper API: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := conn.Write(b); err != nil {
		return fmt.Errorf("connectivity helper API %s: %w", req.Execute, err)
	}
	if uc, ok := conn.(*net.UnixConn); ok {
		uc.CloseWrite()
	}
	out, err := io.ReadAll(io.LimitReader(conn, 1<<20))
	if err != nil && len(out) == 0 {
		return fmt.Errorf("connectivity helper API %s: %w", req.Execute, err)
	}
	var resp apiResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return fmt.Errorf("connectivity helper API %s: bad answer %q: %w", req.Execute, out, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("connectivity helper API %s: %s", req.Execute, resp.Error.Desc)
	}
	if ret != nil && len(resp.Return) > 0 {
		if err := json.Unmarshal(resp.Return, ret); err != nil {
			return fmt.Errorf("connectivity helper API %s: bad return %s: %w", req.Execute, resp.Return, err)
		}
	}
	return nil
}

// AddHostFwd asks the helper listening on socket to forward f and returns
// the helper's id for it.
func AddHostFwd(ctx context.Context, socket string, f HostFwd) (int, error) {
	var ret struct {
		ID int `json:"id"`
	}
	err := call(ctx, socket, apiRequest{Execute: "add_hostfwd", Arguments: map[string]any{
		"proto": "tcp", "host_addr": f.HostAddr.String(), "host_port": f.HostPort,
		"guest_addr": f.GuestAddr.String(), "guest_port": f.GuestPort,
	}}, &ret)
	return ret.ID, err
}

// ListHostFwd returns the helper's forwards.
func ListHostFwd(ctx context.Context, socket string) ([]HostFwd, error) {
	var ret struct {
		Entries []struct {
			Proto     string `json:"proto"`
			HostAddr  string `json:"host_addr"`
			HostPort  uint16 `json:"host_port"`
			GuestAddr string `json:"guest_addr"`
			GuestPort uint16 `json:"guest_port"`
		} `json:"entries"`
	}
	if err := call(ctx, socket, apiRequest{Execute: "list_hostfwd"}, &ret); err != nil {
		return nil, err
	}
	var out []HostFwd
	for _, e := range ret.Entries {
		h, _ := netip.ParseAddr(e.HostAddr)
		g, _ := netip.ParseAddr(e.GuestAddr)
		out = append(out, HostFwd{HostAddr: h, HostPort: e.HostPort, GuestAddr: g, GuestPort: e.GuestPort})
	}
	return out, nil
}
