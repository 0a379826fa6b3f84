package netprobe

import (
	"fmt"
	"strings"
)

// Verdict is the coordinator's reading of a report.
type Verdict struct {
	DenyObserved   bool
	PermitObserved bool
	DNSObserved    bool
	// Problems lists every failed check, actionable; empty when deny and
	// permit were observed. A DNS failure is listed in Warnings instead: an
	// offline host still starts.
	Problems []string
	Warnings []string
	// FailFast lists how denied destinations were answered locally.
	FailFast []string
}

// Judge compares a report with the spec it was run for. The report must
// echo the spec's fingerprint and cover exactly its prefixes.
func Judge(s Spec, r Report) Verdict {
	var v Verdict
	if r.Fingerprint != s.Fingerprint {
		v.Problems = append(v.Problems, fmt.Sprintf("the probe report is for readiness fingerprint %.16s…, not this generation's %.16s…", r.Fingerprint, s.Fingerprint))
		return v
	}
	if s.Mode == ModeAllowlist {
		return judgeAllowlist(s, r, v)
	}
	check := func(kind string, want []Route, prefixes int, ok func(Route) bool, expect string) bool {
		if len(want) != prefixes {
			v.Problems = append(v.Problems, fmt.Sprintf("the probe reports %d %s prefixes, the policy has %d", len(want), kind, prefixes))
			return false
		}
		good := true
		for _, rt := range want {
			if rt.Error != "" {
				v.Problems = append(v.Problems, fmt.Sprintf("%s %s: %s", kind, rt.Prefix, rt.Error))
				good = false
				continue
			}
			if !ok(rt) {
				v.Problems = append(v.Problems, fmt.Sprintf("%s %s: a connection to %s leaves from %s, not %s", kind, rt.Prefix, rt.Probe, rt.Source, expect))
				good = false
			}
		}
		return good
	}
	for i, rt := range r.Deny {
		if i < len(s.Deny) && rt.Prefix != s.Deny[i] {
			v.Problems = append(v.Problems, fmt.Sprintf("deny entry %d is %s, not %s", i, rt.Prefix, s.Deny[i]))
		}
	}
	for i, rt := range r.Allow {
		if i < len(s.Allow) && rt.Prefix != s.Allow[i] {
			v.Problems = append(v.Problems, fmt.Sprintf("allow entry %d is %s, not %s", i, rt.Prefix, s.Allow[i]))
		}
	}
	deny := check("deny", r.Deny, len(s.Deny), func(rt Route) bool {
		if !rt.Prefix.Contains(rt.Probe) {
			return false
		}
		// Via the loopback deny route, or answered locally on lo (fail-fast).
		return rt.Source == LoopbackSource || rt.Source == rt.Probe && rt.Refused == "refused"
	}, "the loopback deny route (127.0.0.1), or refused locally")
	for _, rt := range r.Deny {
		if rt.Source == rt.Probe {
			v.FailFast = append(v.FailFast, fmt.Sprintf("%s %s in %dms", rt.Prefix, rt.Refused, rt.RefusedMillis))
		}
	}
	allow := check("allow", r.Allow, len(s.Allow), func(rt Route) bool { return rt.Source == s.Guest && rt.Prefix.Contains(rt.Probe) }, "the helper's tap ("+s.Guest.String()+")")
	gw := r.GatewaySource == s.Guest
	if !gw {
		v.Problems = append(v.Problems, fmt.Sprintf("the connectivity helper's gateway %s is not routed via its tap (source %s, want %s)", s.Gateway, r.GatewaySource, s.Guest))
	} else if r.Gateway != "refused" && r.Gateway != "connected" && r.Gateway != "unreachable" {
		gw = false
		v.Problems = append(v.Problems, fmt.Sprintf("the connectivity helper's gateway %s did not answer: %s", s.Gateway, r.Gateway))
	}
	v.DenyObserved = deny && len(v.Problems) == 0
	v.PermitObserved = allow && gw
	v.DNSObserved = r.DNSAnswered
	if !r.DNSAnswered {
		v.Warnings = append(v.Warnings, fmt.Sprintf("the DNS forwarder %s did not answer within the bound (%s): name resolution in the sandbox will fail until the host's resolvers answer", s.DNS, strings.TrimSpace(r.DNSError)))
	}
	return v
}

// Ready reports whether the verdict allows publication.
func (v Verdict) Ready() bool { return v.DenyObserved && v.PermitObserved && len(v.Problems) == 0 }

// judgeAllowlist: every probed prefix is unreachable (no route: the
// sandbox's namespace routes only to the proxy) and the proxy accepts.
func judgeAllowlist(s Spec, r Report, v Verdict) Verdict {
	if len(r.Deny) != len(s.Deny) {
		v.Problems = append(v.Problems, fmt.Sprintf("the probe reports %d prefixes, the spec has %d", len(r.Deny), len(s.Deny)))
	}
	for i, rt := range r.Deny {
		if i < len(s.Deny) && rt.Prefix != s.Deny[i] {
			v.Problems = append(v.Problems, fmt.Sprintf("entry %d is %s, not %s", i, rt.Prefix, s.Deny[i]))
			continue
		}
		if !rt.Prefix.Contains(rt.Probe) || !strings.Contains(rt.Error, "network is unreachable") {
			v.Problems = append(v.Problems, fmt.Sprintf("%s: a connection to %s is not unreachable in the sandbox (source %s, %s): only the egress proxy may be routed", rt.Prefix, rt.Probe, rt.Source, rt.Error))
		}
	}
	if r.Proxy != "connected" {
		v.Problems = append(v.Problems, fmt.Sprintf("the egress proxy %s did not accept a connection: %s", s.Proxy, r.Proxy))
	}
	v.DenyObserved = len(v.Problems) == 0
	v.PermitObserved = r.Proxy == "connected"
	return v
}
