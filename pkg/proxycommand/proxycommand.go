// Package proxycommand is the allowlist network mode's ssh ProxyCommand,
// run inside the Agent Sandbox as `lazaret-escalate __lazaret-connect HOST
// PORT` (GIT_SSH_COMMAND names it): it reaches HOST PORT through the egress
// proxy's SOCKS5 port. It lives in the escalation client's binary, not in
// the guest init's (package sandboxinit), which links no network client.
package proxycommand

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/lazaret/lazaret/pkg/egress"
)

// Main is the allowlist network mode's ssh ProxyCommand (`ssh -o
// ProxyCommand='lazaret-escalate __lazaret-connect %h %p'`, which
// GIT_SSH_COMMAND names): it connects to HOST PORT through the egress
// proxy's SOCKS5 port named by ALL_PROXY (socks5h://LABEL:@ADDR:PORT) and
// relays stdin and stdout. A refusal is printed with the proxy's reason.
func Main(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "lazaret-escalate __lazaret-connect: usage: __lazaret-connect HOST PORT (an ssh ProxyCommand)")
		return 2
	}
	port, err := strconv.ParseUint(args[1], 10, 16)
	if err != nil || port == 0 {
		fmt.Fprintf(os.Stderr, "lazaret: %q is not a TCP port\n", args[1])
		return 2
	}
	proxy, user, err := socksProxy(os.Getenv("ALL_PROXY"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "lazaret: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	c, err := egress.DialSOCKS(ctx, proxy, user, args[0], uint16(port))
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lazaret: %s:%d through the egress proxy: %v\n", args[0], port, err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		io.Copy(c, os.Stdin)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		close(done)
	}()
	io.Copy(os.Stdout, c)
	c.Close()
	return 0
}

// socksProxy parses ALL_PROXY (socks5h://[LABEL:@]ADDR:PORT).
func socksProxy(v string) (addr, user string, err error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "socks5h" && u.Scheme != "socks5") || u.Host == "" {
		return "", "", fmt.Errorf("ALL_PROXY is %q, not the egress proxy's socks5h://…: this command works in the allowlist network mode", v)
	}
	if u.User != nil {
		user = u.User.Username()
	}
	return u.Host, user, nil
}
