package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// requestHeaderTimeout bounds the wait for a request's header on a client
// connection (a new one, or one kept alive between plain HTTP requests).
const requestHeaderTimeout = 2 * time.Minute

// serveHTTP serves one client connection of the HTTP proxy: CONNECT
// requests (then a splice), or plain HTTP requests with an absolute URI,
// each forwarded over its own upstream connection.
func (s *server) serveHTTP(ctx context.Context, c net.Conn) {
	hb := &headerBudget{r: c}
	br := bufio.NewReader(hb)
	for {
		c.SetReadDeadline(time.Now().Add(requestHeaderTimeout))
		hb.limit()
		req, err := http.ReadRequest(br)
		hb.lift()
		if err != nil {
			if err != io.EOF {
				s.log.Debug("http proxy: read request", "err", err)
				if !isClosed(err) {
					writeText(c, http.StatusBadRequest, false, "lazaret egress proxy: malformed request: "+err.Error())
				}
			}
			return
		}
		c.SetReadDeadline(time.Time{})
		session := proxyUser(req.Header.Get("Proxy-Authorization"))
		if req.Method == http.MethodConnect {
			s.connect(ctx, c, br, req, session)
			return
		}
		if !s.forward(ctx, c, req, session) {
			return
		}
	}
}

// proxyUser is the user name of a Basic Proxy-Authorization header (the
// session label), or "".
func proxyUser(h string) string {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(b), ":")
	return user
}

// writeText writes a complete text response and reports whether the
// write succeeded.
func writeText(w io.Writer, code int, denied bool, msg string) bool {
	body := msg + "\n"
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n", code, http.StatusText(code))
	if denied {
		b.WriteString("X-Lazaret-Denied: 1\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_, err := io.WriteString(w, b.String())
	return err == nil
}

func writeRefusal(w io.Writer, r *refusal) {
	switch r.kind {
	case refusedByPolicy:
		writeText(w, http.StatusForbidden, true, r.Message)
	case badRequest:
		writeText(w, http.StatusBadRequest, false, r.Message)
	default:
		writeText(w, http.StatusBadGateway, false, r.Message)
	}
}

// splitHostPort splits an authority; def is the port when it has none (0:
// a port is required).
func splitHostPort(authority string, def uint16) (string, uint16, error) {
	host, portText, err := net.SplitHostPort(authority)
	if err != nil {
		if def == 0 || strings.Contains(authority, "]") || strings.Count(authority, ":") > 1 {
			return "", 0, fmt.Errorf("%q is not HOST:PORT", authority)
		}
		return strings.TrimSuffix(authority, ":"), def, nil
	}
	p, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("%q has no valid port", authority)
	}
	return host, uint16(p), nil
}

func (s *server) connect(ctx context.Context, c net.Conn, br *bufio.Reader, req *http.Request, session string) {
	host, port, err := splitHostPort(req.Host, 0)
	if err != nil {
		writeText(c, http.StatusBadRequest, false, "lazaret egress proxy: CONNECT "+err.Error())
		return
	}
	up, ref := s.open(ctx, request{session: session, host: host, port: port, via: "connect"})
	if ref != nil {
		writeRefusal(c, ref)
		return
	}
	defer s.track(up)()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent after its request (a TLS ClientHello sent
	// eagerly) are already in br.
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	splice(c, up)
}

// hopHeaders are the hop-by-hop headers a proxy removes (RFC 9110 7.6.1),
// with the proxy's own.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// forward proxies one plain HTTP request over a new upstream connection
// and reports whether the client connection may carry another request.
func (s *server) forward(ctx context.Context, c net.Conn, req *http.Request, session string) bool {
	defer req.Body.Close()
	if !req.URL.IsAbs() || req.URL.Host == "" {
		writeText(c, http.StatusBadRequest, false, "lazaret egress proxy: send an absolute URI (GET http://host/path) or CONNECT host:port")
		return false
	}
	if !strings.EqualFold(req.URL.Scheme, "http") {
		writeText(c, http.StatusBadRequest, false, fmt.Sprintf("lazaret egress proxy: scheme %q is not proxied as plain HTTP; use CONNECT for https", req.URL.Scheme))
		return false
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		writeText(c, http.StatusBadRequest, false, "lazaret egress proxy: "+err.Error())
		return false
	}
	up, ref := s.open(ctx, request{session: session, host: host, port: port, via: "http"})
	if ref != nil {
		writeRefusal(c, ref)
		return false
	}
	defer s.track(up)()
	clientClose := req.Close
	expect := strings.EqualFold(req.Header.Get("Expect"), "100-continue")
	removeHop(req.Header)
	req.Header.Del("Expect")
	req.Close = true // one request per upstream connection
	req.RequestURI = ""
	if req.Host == "" {
		req.Host = req.URL.Host
	}
	if expect {
		// The proxy decided: let the client send its body now.
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false
		}
	}
	if err := req.Write(up); err != nil {
		writeText(c, http.StatusBadGateway, false, fmt.Sprintf("lazaret: egress to %s: sending the request: %v", req.URL.Host, err))
		return false
	}
	uhb := &headerBudget{r: up}
	ubr := bufio.NewReader(uhb)
	var resp *http.Response
	for {
		uhb.limit()
		resp, err = http.ReadResponse(ubr, req)
		uhb.lift()
		if err != nil {
			writeText(c, http.StatusBadGateway, false, fmt.Sprintf("lazaret: egress to %s: reading the response: %v", req.URL.Host, err))
			return false
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// An interim response: pass it on and read the final one.
		fmt.Fprintf(c, "HTTP/1.1 %s\r\n", resp.Status)
		resp.Header.Write(c)
		io.WriteString(c, "\r\n")
	}
	defer resp.Body.Close()
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	removeHop(resp.Header)
	keep := !clientClose && req.ProtoAtLeast(1, 1) && (resp.ContentLength >= 0 || chunked || req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified) && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Close = !keep
	if chunked {
		resp.TransferEncoding = []string{"chunked"}
	}
	if err := resp.Write(c); err != nil {
		return false
	}
	return keep
}

// splice copies both ways until both directions end, passing each
// direction's end on as a half-close.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

func isClosed(err error) bool {
	return strings.Contains(err.Error(), "use of closed network connection") || strings.Contains(err.Error(), "connection reset")
}

// maxHeaderBytes bounds a request's header from the sandbox and a
// response's header from upstream (net/http's server default).
// http.ReadRequest and ReadResponse read a header without any bound, and
// this proxy runs on the host: a sandbox sending header lines for the
// whole requestHeaderTimeout would grow it by gigabytes.
const maxHeaderBytes = 1 << 20

// errHeaderTooLarge ends a read past maxHeaderBytes.
var errHeaderTooLarge = fmt.Errorf("the header is larger than %d KiB", maxHeaderBytes>>10)

// headerBudget passes at most maxHeaderBytes from r between limit and
// lift (the header, read through a bufio.Reader over it), and everything
// after lift (a body, a splice).
type headerBudget struct {
	r       io.Reader
	n       int64
	limited bool
}

func (h *headerBudget) limit() { h.n, h.limited = maxHeaderBytes, true }
func (h *headerBudget) lift()  { h.limited = false }

func (h *headerBudget) Read(p []byte) (int, error) {
	if !h.limited {
		return h.r.Read(p)
	}
	if h.n <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > h.n {
		p = p[:h.n]
	}
	k, err := h.r.Read(p)
	h.n -= int64(k)
	return k, err
}
