package slirp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestNetworkFor(t *testing.T) {
	n, err := NetworkFor(DefaultCIDR)
	if err != nil || n.Gateway.String() != "10.0.2.2" || n.DNS.String() != "10.0.2.3" || n.Guest.String() != "10.0.2.100" {
		t.Fatalf("%+v %v", n, err)
	}
	for _, bad := range []string{"10.0.2.0/25", "10.0.2.1/24", "fd00::/64"} {
		if _, err := NetworkFor(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestArgv(t *testing.T) {
	n, _ := NetworkFor(DefaultCIDR)
	argv := Chain{Nsenter: "/usr/bin/nsenter", Self: "/x/lazaret-hc", Slirp: "/usr/bin/slirp4netns", ResolvConf: "/run/r", SupervisorPID: 42, Network: n, ExitFD: 3, ReadyFD: 4}.Argv()
	got := strings.Join(argv, " ")
	for _, want := range []string{"--user=/proc/42/ns/user", "--preserve-credentials", RoleArg + " --resolv-conf=/run/r --", "--enable-sandbox", "--enable-seccomp", "--disable-host-loopback", "--mtu=65520", "--exit-fd=3", "--ready-fd=4", "--cidr=10.0.2.0/24"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv lacks %q: %s", want, got)
		}
	}
	if !slices.Equal(argv[len(argv)-2:], []string{"42", Tap}) {
		t.Errorf("must join the supervisor by pid: %v", argv)
	}
	if string(ResolvConf([]netip.Addr{netip.MustParseAddr("198.18.0.2")})) != "# Lazaret connectivity helper: the Domain's DNS resolvers\nnameserver 198.18.0.2\n" {
		t.Error("resolv.conf")
	}
}
