package network

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/slirp"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/timing"
)

// Network timing.
var (
	helperReadyTimeout = 10 * time.Second
	helperStopWait     = 5 * time.Second
	// dnsProbeBound is how long the readiness probe waits for the DNS
	// forwarder: an answer proves it; silence (an offline host) is
	// recorded as a warning and does not block the start.
	dnsProbeBound = 1500 * time.Millisecond
	// hostResolveTimeout bounds the resolution of a profile's allow_hosts.
	hostResolveTimeout = 5 * time.Second
)

// Launcher starts the helper through the coordinator's causal broker.
type Launcher interface {
	Acquire(ctx context.Context, spec proc.AcquireSpec) (*proc.Child, error)
}

// Config is what the network role needs from its coordinator.
type Config struct {
	Log *slog.Logger
	// LinkExe is the binary hosting the slirp mount-namespace link
	// (slirp.RoleArg): lazaret-gitroute.
	LinkExe string
	Timing  *timing.Recorder // nil records nothing
	// Store is the Domain Store the helper and network participants are
	// recorded in.
	Store      *store.Store
	DomainID   domain.ID
	Generation uint64
	// Profile is the generation's validated Agent Profile: its
	// fingerprint, network settings and ports.
	Profile *config.Profile
	// SidecarID is the generation's Network Sidecar component ID.
	SidecarID string
	Hostname  string
	// RuntimeDir is the Domain's private runtime directory (the helper's
	// API socket, the guest's name-service files); LogPath the Domain log
	// named in messages; DenialsPath the egress proxy's denial log.
	RuntimeDir, LogPath, DenialsPath string
	// Progress reports a line (a warning) to the starting sessions.
	Progress func(line string)
	Launcher Launcher
	// Watch fails the Domain when child exits while it runs.
	Watch func(child *proc.Child, what string)
	// Ack sends the signed exact echo of RS's staged ownership.
	Ack func(*lv1.StagedProcessOwnership) error
}

// Service is the generation's network role.
type Service struct {
	cfg Config
	log *slog.Logger

	portsMu sync.Mutex // serialises port forwards

	mu          sync.Mutex
	policy      netpolicy.Policy
	addr        slirp.Network
	netns       *lv1.NamespaceIdentity
	fingerprint [32]byte
	probe       netprobe.Spec
	helper      *proc.Child
	exitW       *os.File // the helper's --exit-fd peer: closing it stops the helper
	// helperOut is closed once the helper's output is logged to its end
	// (nil before the helper starts).
	helperOut   chan struct{}
	verdict     *netprobe.Verdict
	pinnedHosts map[string][]string // allow_hosts → the addresses pinned
	ports       []forwardedPort     // host ports forwarded into the sandbox
	etcFiles    map[string]string   // guest /etc file → the generation's host file
	launched    bool                // Launch ran: started will be closed
	started     chan struct{}       // closed when the helper's start attempt ended
	// helperErr is the helper start's outcome, set before started is
	// closed (HelperReady): the attached runsc's staged ownership is
	// acknowledged (and runsc runs) only after it, while the lower, State
	// Anchors and Git routing are prepared in parallel with the helper's
	// start.
	helperErr error
	egress    egressState
}

// New returns the generation's network role; nothing is started.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	if cfg.Watch == nil {
		cfg.Watch = func(*proc.Child, string) {}
	}
	return &Service{cfg: cfg, log: cfg.Log, started: make(chan struct{})}
}

// SidecarID is the generation's Network Sidecar component ID.
func (s *Service) SidecarID() string { return s.cfg.SidecarID }

// Policy is the generation's derived network policy.
func (s *Service) Policy() netpolicy.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// Allowlist reports whether the policy is in the allowlist mode.
func (s *Service) Allowlist() bool { return s.Policy().Mode == netpolicy.ModeAllowlist }

// Gateway is the helper's gateway address on the tap.
func (s *Service) Gateway() netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr.Gateway
}

// NetNS is the RS network namespace the helper joins (nil before Prepare).
func (s *Service) NetNS() *lv1.NamespaceIdentity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.netns
}

// Probe is the readiness probe spec the sandbox init runs.
func (s *Service) Probe() netprobe.Spec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probe
}

// EtcFiles maps the guest's name-service files to the generation's host
// files.
func (s *Service) EtcFiles() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.etcFiles
}

// APISocket is the helper's API socket in the Domain's private runtime
// directory.
func APISocket(runtimeDir string) string { return filepath.Join(runtimeDir, slirp.APISocketName) }

// ReadinessFingerprint is the network readiness fingerprint (FR-18): a
// digest over the Domain ID, generation, configuration fingerprint, Network
// Sidecar ID, policy digest and the RS netns identity, each length-framed.
func ReadinessFingerprint(id domain.ID, generation uint64, configFingerprint, sidecarID string, policyDigest [32]byte, netns *lv1.NamespaceIdentity) [32]byte {
	h := sha256.New()
	put := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	num := func(v uint64) []byte { var b [8]byte; binary.BigEndian.PutUint64(b[:], v); return b[:] }
	put([]byte("lazaret/v1/network-readiness"))
	put([]byte(id))
	put(num(generation))
	put([]byte(configFingerprint))
	put([]byte(sidecarID))
	put(policyDigest[:])
	put(num(netns.GetDev()))
	put(num(netns.GetIno()))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Status is the network part of `lazaret status`; nil-safe.
func (s *Service) Status() *lv1.NetworkStatus {
	n := &lv1.NetworkStatus{HelperCidr: proto.String(slirp.DefaultCIDR.String())}
	if s == nil {
		return n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.helper != nil {
		n.ConnectivityHelper = proto.String(s.helper.Identity().String())
	}
	if s.fingerprint != ([32]byte{}) {
		n.ReadinessFingerprint = proto.String(hex.EncodeToString(s.fingerprint[:]))
	}
	if v := s.verdict; v != nil {
		n.DenyObserved, n.PermitObserved, n.DnsObserved = proto.Bool(v.DenyObserved), proto.Bool(v.PermitObserved), proto.Bool(v.DNSObserved)
		n.Warnings = v.Warnings
		n.FailFast = v.FailFast
	}
	if s.pinnedHosts != nil {
		n.AllowHostsPinned = map[string]*structpb.ListValue{}
		for host, addrs := range s.pinnedHosts {
			l := &structpb.ListValue{}
			for _, a := range addrs {
				l.Values = append(l.Values, structpb.NewStringValue(a))
			}
			n.AllowHostsPinned[host] = l
		}
	}
	n.ForwardedPorts = s.portsStatusLocked()
	return n
}

// PolicyDigestString is the policy digest for `lazaret status`; nil-safe.
func (s *Service) PolicyDigestString() string {
	var p netpolicy.Policy
	if s != nil {
		p = s.Policy()
	}
	d := p.Digest()
	return fmt.Sprintf("%x", d[:])
}
