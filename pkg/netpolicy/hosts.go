package netpolicy

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Mode selects how the sandbox reaches the network.
type Mode string

const (
	// ModeDeny is the prefix policy alone: default permit except the deny
	// prefixes (the zero value, and the only mode of a v1 document).
	ModeDeny Mode = ""
	// ModeAllowlist confines the sandbox to the egress proxy, which
	// connects only to host names matching a host rule.
	ModeAllowlist Mode = "allowlist"
)

// The egress proxy's endpoint in allowlist mode: a /30 veth link between
// the sandbox's network namespace (SandboxAddr) and the Runtime
// Supervisor's (ProxyAddr), with the HTTP proxy and the SOCKS5 proxy on
// ProxyAddr.
var (
	ProxyAddr   = netip.MustParseAddr("10.0.3.1")
	SandboxAddr = netip.MustParseAddr("10.0.3.2")
	ProxyPrefix = netip.MustParsePrefix("10.0.3.0/30")
)

// Ports of the egress proxy on ProxyAddr.
const (
	HTTPPort  = 3128
	SOCKSPort = 1080
)

// HostRule is one allowed host name pattern: an exact name, or "*.name"
// for the strict subdomains of name, optionally limited to one port.
type HostRule struct {
	Pattern string // lower case, no trailing dot; "*.name" for a wildcard
	Port    uint16 // 0: any port
}

// HostRuleSource is a host rule with where it came from (for messages).
type HostRuleSource struct {
	Rule   HostRule
	Source string
}

// ParseHostRule parses a host rule: `name`, `*.name`, or either with
// `:PORT`. Names are ASCII letters, digits and hyphens in dot-separated
// labels; they are lower-cased and a trailing dot is removed.
func ParseHostRule(s string) (HostRule, error) {
	bad := func(format string, args ...any) (HostRule, error) {
		return HostRule{}, errdefs.New(errdefs.ErrInvalid, "host rule %q: "+format, append([]any{s}, args...)...)
	}
	in := strings.TrimSpace(s)
	if in == "" {
		return bad("empty; write a host name such as \"api.example.com\", \"*.example.com\" or \"git.example.com:22\"")
	}
	if strings.Count(in, ":") > 1 || strings.HasPrefix(in, "[") {
		return bad("IPv6 addresses are not supported (IPv6 is disabled in the sandbox)")
	}
	name, portText, hasPort := strings.Cut(in, ":")
	var r HostRule
	if hasPort {
		p, err := strconv.ParseUint(portText, 10, 16)
		if err != nil || p == 0 {
			return bad("port %q is not a number from 1 to 65535; write NAME:PORT, or NAME alone for any port", portText)
		}
		r.Port = uint16(p)
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return bad("%s is an IP address, not a host name; to allow an address write network.allow = [\"%s/32\"]", name, name)
	}
	switch {
	case name == "*" || name == "*.":
		return bad("a bare \"*\" would allow every host; list the names (or \"*.example.com\" for the subdomains of one), or use network.mode = \"deny\" for the prefix policy")
	case strings.HasPrefix(name, "*."):
		if err := checkName(name[2:]); err != nil {
			return bad("%v", err)
		}
	case strings.Contains(name, "*"):
		return bad("a wildcard is allowed only as the whole first label, as in \"*.example.com\"")
	default:
		if err := checkName(name); err != nil {
			return bad("%v", err)
		}
	}
	r.Pattern = name
	return r, nil
}

// checkName checks an ASCII LDH host name (lower case, no trailing dot).
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("no host name; write a name such as \"api.example.com\"")
	}
	if len(name) > 253 {
		return fmt.Errorf("the name is longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return fmt.Errorf("empty label (two dots, or a leading dot); write labels separated by single dots")
		}
		if len(label) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", label)
		}
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			case c > 0x7f:
				return fmt.Errorf("label %q is not ASCII; internationalised names are not supported, write the xn-- (punycode) form", label)
			default:
				return fmt.Errorf("label %q has %q: host names are letters, digits and hyphens", label, c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
	}
	return nil
}

// String is the rule in the syntax ParseHostRule reads.
func (r HostRule) String() string {
	if r.Port == 0 {
		return r.Pattern
	}
	return r.Pattern + ":" + strconv.Itoa(int(r.Port))
}

// Wildcard reports whether the rule is "*.name".
func (r HostRule) Wildcard() bool { return strings.HasPrefix(r.Pattern, "*.") }

// NormalizeHost lower-cases host and removes one trailing dot, the form
// Match compares.
func NormalizeHost(host string) string { return strings.TrimSuffix(strings.ToLower(host), ".") }

// Match reports whether a request for host:port is allowed by the rule:
// the names compare case-insensitively with a trailing dot ignored, and
// "*.name" matches the strict subdomains of name, never name itself.
func (r HostRule) Match(host string, port uint16) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	host = NormalizeHost(host)
	if r.Wildcard() {
		suffix := r.Pattern[1:] // ".name"
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix) && !strings.HasPrefix(host, ".")
	}
	return host == r.Pattern
}

// Presets are named sets of host rules (network.allow_presets), kept to
// what each tool needs to work and nothing it merely reports to:
//
//   - anthropic: Claude Code's model API (also its subscription login's
//     profile and usage calls), its feature flags at statsig.anthropic.com
//     (both on Anthropic's published network requirements), and the OAuth
//     token endpoint that refreshes a subscription login (platform.claude.com;
//     console.anthropic.com in earlier releases). Crash reporting
//     (sentry.io) is left out: Claude Code works without it.
//   - openai: Codex's API-key endpoint (api.openai.com), the ChatGPT
//     backend a ChatGPT login talks to (chatgpt.com), and that login's
//     token refresh (auth.openai.com).
//   - npm: the npm registry, which serves metadata and tarballs from one
//     host, and the Yarn registry alias of it.
//   - pypi: the package index and the host its files are served from.
//   - github: the web and Git host (any port: HTTPS and SSH on 22), its
//     API and archive hosts (*.github.com) and the raw, release-asset and
//     avatar content hosts (*.githubusercontent.com).
//   - debian: the Debian archive and its security archive.
var Presets = map[string][]string{
	"anthropic": {"api.anthropic.com", "statsig.anthropic.com", "platform.claude.com", "console.anthropic.com"},
	"openai":    {"api.openai.com", "chatgpt.com", "auth.openai.com"},
	"npm":       {"registry.npmjs.org", "registry.yarnpkg.com"},
	"pypi":      {"pypi.org", "files.pythonhosted.org"},
	"github":    {"github.com", "*.github.com", "*.githubusercontent.com"},
	"debian":    {"deb.debian.org", "security.debian.org"},
}

// PresetNames are the names of Presets, sorted.
func PresetNames() []string {
	out := make([]string, 0, len(Presets))
	for n := range Presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sortHostRules(rs []HostRule) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Pattern != rs[j].Pattern {
			return rs[i].Pattern < rs[j].Pattern
		}
		return rs[i].Port < rs[j].Port
	})
}

// compactHostRules removes duplicates from sorted rules, and every rule
// whose pattern also appears without a port (which already allows it).
func compactHostRules(rs []HostRule) []HostRule {
	var out []HostRule
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Pattern == r.Pattern && (out[n-1].Port == 0 || out[n-1].Port == r.Port) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// AllowsHost returns the first host rule that allows host:port.
func (p Policy) AllowsHost(host string, port uint16) (HostRule, bool) {
	for _, r := range p.Hosts {
		if r.Match(host, port) {
			return r, true
		}
	}
	return HostRule{}, false
}

// alwaysDenied are destinations the egress proxy never connects to unless
// an allow prefix covers them: loopback, "this network", link-local,
// multicast and reserved space.
var alwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// SpecialKind names why a is in the space Permits refuses regardless of
// the deny prefixes ("loopback", "link-local"…), or "" when it is not.
func SpecialKind(a netip.Addr) string {
	a = a.Unmap()
	for i, q := range alwaysDenied {
		if q.Contains(a) {
			return [...]string{"loopback", "unspecified (0.0.0.0/8)", "link-local", "multicast", "reserved"}[i]
		}
	}
	return ""
}

// AllowCovers reports whether an allow prefix contains a.
func (p Policy) AllowCovers(a netip.Addr) bool {
	a = a.Unmap()
	for _, q := range p.Allow {
		if q.Contains(a) {
			return true
		}
	}
	return false
}

// Permits reports whether the policy lets a connection reach IPv4 address
// a: the longest allow prefix containing a against the longest deny prefix
// (the allow wins when at least as specific, as in the routes), default
// permit; loopback, 0/8, link-local, multicast and reserved addresses
// only when an allow prefix covers them. Any non-IPv4 address is refused.
func (p Policy) Permits(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() {
		return false
	}
	allowBits, denyBits := -1, -1
	for _, q := range p.Allow {
		if q.Contains(a) && q.Bits() > allowBits {
			allowBits = q.Bits()
		}
	}
	if SpecialKind(a) != "" && allowBits < 0 {
		return false
	}
	for _, q := range p.Deny {
		if q.Contains(a) && q.Bits() > denyBits {
			denyBits = q.Bits()
		}
	}
	return denyBits < 0 || allowBits >= denyBits
}
