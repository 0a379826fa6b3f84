#!/usr/bin/env bash
# Host set-up for Lazaret: installs only what is missing, so every step is
# idempotent and a second run is fast. Called by `make run`, `make test` and
# `make setup`; needs root (it uses sudo when run as another user).
#
# Packages come from one table, pkg/hostcheck/packages.tsv, which `lazaret
# doctor` reads too: apt (Debian, Ubuntu), dnf (Fedora, RHEL), pacman (Arch)
# or zypper (openSUSE), detected from /etc/os-release ID and ID_LIKE and
# checked with `command -v`. Only Debian 12 is tested end to end.
#
#   scripts/setup.sh deps                 packages, pinned runsc, device permissions
#   scripts/setup.sh packages [MANAGER]   print the package list for MANAGER (apt, dnf,
#                                         pacman, zypper; default: detected), one a line
#   scripts/setup.sh user NAME            a non-root user with subordinate uid/gid ranges
#   scripts/setup.sh images NAME KIND...  build images (debian, busybox; node, claude, codex: recipes) as user NAME
#   scripts/setup.sh demo-workspace NAME  a small Git project owned by NAME (for make run as root)
#   scripts/setup.sh protoc               protobuf-compiler (for make proto / proto-check)
#   scripts/setup.sh tlc                  a Java runtime and tla2tools.jar (for make tlc); prints
#                                         the jar's path
#   scripts/setup.sh bench-deps           what `make bench` compares with: bubblewrap, socat,
#                                         ripgrep (and Node.js/npm when not on PATH) and the
#                                         pinned srt from the npm registry; prints srt's path
#   scripts/setup.sh bench-npm            the packages of integration/testdata/npm-project
#                                         from the npm registry into an npm cache (once per
#                                         lock file) for `make bench`'s npm install; prints
#                                         the cache's path
#   scripts/setup.sh kernel [--force]     qualify the running kernel build when it has no
#                                         record (always with --force): `lazaret kernel qualify`
set -euo pipefail

RUNSC_VERSION="${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}"
DEPS_DIR="${LAZARET_DEPS_DIR:-/var/cache/lazaret}"
# The build recipe is part of the directory's name: a machine that has the
# runsc of an older recipe builds the current one (and removes the old).
RUNSC_RECIPE="precompiled"
RUNSC_DIR="$DEPS_DIR/runsc/$RUNSC_VERSION-$RUNSC_RECIPE"
# tla2tools.jar for `make tlc`: Maven coordinates org.lamport:tla2tools.
# TLA2TOOLS_SHA256 pins the jar; a downloaded jar that does not match (or
# with no pin set) is refused. TLA2TOOLS_JAR=/path/to/tla2tools.jar uses a
# jar obtained otherwise (a release download, or built from source).
TLA2TOOLS_VERSION="${TLA2TOOLS_VERSION:-1.8.0}"
TLA2TOOLS_SHA256="${TLA2TOOLS_SHA256:-}"
TLA2TOOLS_DIR="$DEPS_DIR/tla2tools/$TLA2TOOLS_VERSION"
# srt (Anthropic's sandbox-runtime), the sandbox `make bench` measures
# Lazaret's cold start against, pinned to one npm release.
SRT_PACKAGE="@anthropic-ai/sandbox-runtime"
SRT_VERSION="${SRT_VERSION:-0.0.83}"
SRT_DIR="$DEPS_DIR/srt/$SRT_VERSION"
here="$(cd "$(dirname "$0")/.." && pwd)"
TABLE="$here/pkg/hostcheck/packages.tsv"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "root is needed for: $* (run as root or install sudo)"; fi
}

# The package-manager family of one os-release ID or ID_LIKE word
# (pkg/hostcheck managerForID is the same mapping).
manager_for_id() {
	case "$1" in
	debian | ubuntu) echo apt ;;
	fedora | rhel | centos) echo dnf ;;
	arch) echo pacman ;;
	suse | sles | opensuse | opensuse-*) echo zypper ;;
	esac
}

manager_tool() {
	case "$1" in
	apt) echo apt-get ;;
	dnf | pacman | zypper) echo "$1" ;;
	*) die "unknown package manager '$1': use apt, dnf, pacman or zypper" ;;
	esac
}

# Manager.Family in pkg/hostcheck.
family() {
	case "$1" in
	apt) echo Debian/Ubuntu ;;
	dnf) echo Fedora/RHEL ;;
	pacman) echo Arch ;;
	zypper) echo openSUSE ;;
	esac
}

# detect sets MANAGER and DISTRO: the first of os-release's ID and ID_LIKE
# whose manager is on PATH, else the first manager on PATH.
# LAZARET_OS_RELEASE names another os-release file (tests).
detect() {
	local f="${LAZARET_OS_RELEASE:-}" ids="" id m
	if [ -z "$f" ]; then
		for f in /etc/os-release /usr/lib/os-release; do [ -r "$f" ] && break; done
	fi
	DISTRO="" MANAGER=""
	if [ -r "$f" ]; then
		DISTRO="$(. "$f" >/dev/null 2>&1; printf '%s' "${NAME:-}")" || true
		ids="$(. "$f" >/dev/null 2>&1; printf '%s %s' "${ID:-}" "${ID_LIKE:-}")" || true
	fi
	for id in $ids; do
		m="$(manager_for_id "$id")"
		if [ -n "$m" ] && command -v "$(manager_tool "$m")" >/dev/null; then MANAGER="$m"; break; fi
	done
	if [ -z "$MANAGER" ]; then
		for m in apt dnf pacman zypper; do
			if command -v "$(manager_tool "$m")" >/dev/null; then MANAGER="$m"; break; fi
		done
		[ -n "$MANAGER" ] || die "no package manager setup knows (apt-get, dnf, pacman, zypper) is on PATH: install the packages listed in $TABLE by hand"
		if [ -r "$f" ]; then
			say "$f names no distribution setup knows (ID, ID_LIKE:$(printf ' %s' $ids)); using $MANAGER, found on PATH"
		else
			say "no readable os-release file; using $MANAGER, found on PATH"
		fi
	fi
	[ -n "$DISTRO" ] || DISTRO="$(family "$MANAGER")"
}

# resolve STEP MANAGER DISTRO sets RESOLVED to the table's package names for
# STEP under MANAGER, in table order (RESOLVED_PROVIDES to the command or
# file each provides), and says which dependencies DISTRO
# does not package and what will not work without them
# (hostcheck.PackagesFor and hostcheck.LacksStatement).
resolve() {
	local step="$1" mgr="$2" distro="$3" dep provides apt dnf pacman zypper s without name
	[ -r "$TABLE" ] || die "$TABLE is missing: run setup from a Lazaret checkout"
	manager_tool "$mgr" >/dev/null
	RESOLVED=() RESOLVED_PROVIDES=()
	# Every field is non-empty (TestPackagesTableParses), so tabs never collapse.
	while IFS=$'\t' read -r dep provides apt dnf pacman zypper s without; do
		case "$dep" in '' | '#'*) continue ;; esac
		[ "$s" = "$step" ] || continue
		case "$mgr" in
		apt) name="$apt" ;;
		dnf) name="$dnf" ;;
		pacman) name="$pacman" ;;
		zypper) name="$zypper" ;;
		esac
		if [ "$name" = - ]; then
			say "$dep is not packaged for $distro: $without"
		else
			RESOLVED+=("$name")
			RESOLVED_PROVIDES+=("$provides")
		fi
	done <"$TABLE"
}

installed() {
	case "$1" in
	apt) dpkg-query -W -f='${Status}' "$2" 2>/dev/null | grep -q 'install ok installed' ;;
	dnf | zypper) rpm -q "$2" >/dev/null 2>&1 ;;
	pacman) pacman -Q "$2" >/dev/null 2>&1 ;;
	esac
}

# install_step STEP installs the table's packages for STEP that are missing:
# a package is skipped when it is installed, or when the command it
# provides is already on PATH (installed otherwise, e.g. Node.js from
# nodesource or nvm).
install_step() {
	detect
	resolve "$1" "$MANAGER" "$DISTRO"
	local missing=() p i
	for i in "${!RESOLVED[@]}"; do
		p="${RESOLVED[$i]}"
		case "${RESOLVED_PROVIDES[$i]}" in
		/*) ;;
		*) command -v "${RESOLVED_PROVIDES[$i]}" >/dev/null 2>&1 && continue ;;
		esac
		installed "$MANAGER" "$p" || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	case "$MANAGER" in
	apt)
		say "installing Debian packages: ${missing[*]}"
		as_root apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
		;;
	dnf)
		say "installing $DISTRO packages with dnf: ${missing[*]}"
		as_root dnf install -y -q "${missing[@]}" >/dev/null
		;;
	pacman)
		# No -y: a partial upgrade is unsupported on Arch; if the sync
		# database is stale, pacman fails and `pacman -Syu` is the fix.
		say "installing $DISTRO packages with pacman: ${missing[*]}"
		as_root pacman -S --needed --noconfirm "${missing[@]}" >/dev/null
		;;
	zypper)
		say "installing $DISTRO packages with zypper: ${missing[*]}"
		as_root zypper --non-interactive --quiet install "${missing[@]}" >/dev/null
		;;
	esac
}

packages() {
	if [ $# -gt 0 ]; then
		MANAGER="$1"
		manager_tool "$MANAGER" >/dev/null
		DISTRO="$(family "$MANAGER")"
	else
		detect
	fi
	resolve deps "$MANAGER" "$DISTRO"
	printf '%s\n' "${RESOLVED[@]}"
}

# build_runsc builds the pinned runsc from its Go module with its seccomp
# programs precompiled, as gVisor's release build does (the module's own
# `go install` build compiles the sentry's and gofer's filters on every
# start: tens of milliseconds of CPU in every `lazaret run`). The generator
# is scripts/runsc-seccomp; the binary names the pinned version in `runsc
# --version` and its build information (lazaret doctor reads it there).
build_runsc() {
	say "building the pinned runsc $RUNSC_VERSION with precompiled seccomp filters (pure Go, about 2 minutes; cached in $RUNSC_DIR)"
	command -v go >/dev/null || die "go is not installed: install Go 1.26 or later"
	local tmp mod
	tmp="$(mktemp -d)"
	# A failed build leaves nothing behind (the module copy is ~70 MB).
	trap "rm -rf '$tmp'" EXIT
	# The go command runs outside any module here, on the module proxy.
	mod="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "gvisor.dev/gvisor@$RUNSC_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[ -d "$mod" ] || die "go mod download gvisor.dev/gvisor@$RUNSC_VERSION gave no module directory: check the Go module proxy (go env GOPROXY)"
	cp -R "$mod" "$tmp/gvisor"
	chmod -R u+w "$tmp/gvisor"
	local cfg="$tmp/gvisor/runsc/boot/filter/config"
	mkdir "$tmp/gvisor/lazaret-precompile"
	sed '/^\/\/go:build ignore$/d' "$here/scripts/runsc-seccomp/precompile.go" >"$tmp/gvisor/lazaret-precompile/main.go"
	sed '/^\/\/go:build ignore$/d' "$here/scripts/runsc-seccomp/subset.go" >"$cfg/lazaret_subset.go"
	sed -i 's/^\topts, err := optionsToPrecompile()$/&\n\topts = lazaretPrecompiled(opts)/' "$cfg/config_precompiled.go"
	grep -q '^	opts = lazaretPrecompiled(opts)$' "$cfg/config_precompiled.go" ||
		die "gvisor $RUNSC_VERSION: runsc/boot/filter/config/config_precompiled.go has no 'opts, err := optionsToPrecompile()' line to narrow: update scripts/runsc-seccomp for this gVisor version"
	(
		cd "$tmp/gvisor"
		export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
		# -trimpath as in the build below, which then reuses the packages
		# compiled for the generator (most of the sentry).
		go run -trimpath ./lazaret-precompile boot runsc/boot/filter/filter_precompiled.go
		go run -trimpath ./lazaret-precompile gofer runsc/fsgofer/filter/filter_precompiled.go
		# CGO_ENABLED=0 is required: a cgo build re-execs /proc/self/exe
		# after chroot and fails.
		go build -trimpath -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" -o "$tmp/runsc" ./runsc
	) >&2 || die "building runsc $RUNSC_VERSION failed (output above)"
	as_root mkdir -p "$RUNSC_DIR"
	as_root install -m 0755 "$tmp/runsc" "$RUNSC_DIR/runsc"
	rm -rf "$tmp"
	trap - EXIT
}

deps() {
	install_step deps
	if [ ! -x "$RUNSC_DIR/runsc" ]; then
		build_runsc
	fi
	# The plain `go install` build of earlier set-ups (no precompiled
	# seccomp programs); nothing refers to it any more.
	if [ -d "$DEPS_DIR/runsc/$RUNSC_VERSION" ]; then
		as_root rm -rf "$DEPS_DIR/runsc/$RUNSC_VERSION"
	fi
	as_root chmod 0755 "$DEPS_DIR" "$DEPS_DIR/runsc" "$RUNSC_DIR"
	# slirp4netns and the FUSE router need these as the developer; 0666 is the
	# usual distribution default, but fresh VMs here have 0600.
	for dev in /dev/net/tun /dev/fuse; do
		[ -e "$dev" ] || die "$dev is missing: load the kernel module (modprobe ${dev##*/})"
		if [ "$(stat -c %a "$dev")" != 666 ]; then
			say "making $dev usable by users (chmod 0666)"
			as_root chmod 0666 "$dev"
		fi
	done
	if [ -d /etc/udev/rules.d ] && [ ! -f /etc/udev/rules.d/70-lazaret.rules ]; then
		as_root sh -c 'printf "%s\n" "KERNEL==\"tun\", MODE=\"0666\"" "KERNEL==\"fuse\", MODE=\"0666\"" > /etc/udev/rules.d/70-lazaret.rules'
	fi
}

next_subid_start() {
	# First id after every existing range in /etc/subuid and /etc/subgid.
	awk -F: 'BEGIN{m=100000} NF==3 {e=$2+$3; if (e>m) m=e} END{print m}' /etc/subuid /etc/subgid 2>/dev/null || echo 100000
}

user() {
	local name="$1"
	if ! id "$name" >/dev/null 2>&1; then
		say "creating user $name"
		as_root useradd --create-home --shell /bin/bash "$name"
	fi
	local home; home="$(getent passwd "$name" | cut -d: -f6)"
	[ -d "$home" ] || as_root install -d -o "$name" -g "$(id -gn "$name")" -m 0755 "$home"
	for f in /etc/subuid /etc/subgid; do
		[ -f "$f" ] || as_root touch "$f"
	done
	if ! awk -F: -v u="$name" -v i="$(id -u "$name")" '($1==u||$1==i) && $3>=65536 {f=1} END{exit !f}' /etc/subuid ||
		! awk -F: -v u="$name" -v i="$(id -u "$name")" '($1==u||$1==i) && $3>=65536 {f=1} END{exit !f}' /etc/subgid; then
		local start; start="$(next_subid_start)"
		say "giving $name subordinate ids $start-$((start + 65535))"
		as_root usermod --add-subuids "$start-$((start + 65535))" --add-subgids "$start-$((start + 65535))" "$name"
	fi
}

images() {
	local name="$1"; shift
	local home; home="$(getent passwd "$name" | cut -d: -f6)"
	local bin="${LAZARET_BIN:-$here/bin}"
	# The user must be able to run the binaries: copy them where it can.
	local tools; tools="$(mktemp -d /tmp/lazaret-setup.XXXXXX)"
	chmod 0755 "$tools"
	install -m 0755 "$bin/lazaret" "$tools/lazaret"
	# A recipe image is built in a sandbox: the helpers sit beside lazaret.
	for b in lazaret-cli lazaret-hc lazaret-rs lazaret-gitroute lazaret-escalate lazaret-init; do
		if [ -x "$bin/$b" ]; then install -m 0755 "$bin/$b" "$tools/$b"; fi
	done
	for kind in "$@"; do
		case "$kind" in
		busybox | debian) ;;
		*)
			# A profile's recipe image (node, claude, codex): lazaret
			# builds it only when it is not current, so this is cheap
			# once built. Its base (debian) must come first.
			say "ensuring the recipe image of profile $kind as $name (npm registry downloads the first time)"
			as_root runuser -u "$name" -- env -i HOME="$home" USER="$name" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
				LAZARET_RUNSC="${LAZARET_RUNSC:-$RUNSC_DIR/runsc}" "$tools/lazaret" image build "$kind"
			continue
			;;
		esac
		if [ -f "$home/.local/share/lazaret/images/$kind/index.json" ]; then
			continue
		fi
		say "building the $kind image as $name (cached in $home/.local/share/lazaret/images/$kind)"
		as_root runuser -u "$name" -- env -i HOME="$home" USER="$name" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
			"$tools/lazaret" image build "$kind"
	done
	rm -rf "$tools"
}

demo_workspace() {
	local name="$1"
	local home; home="$(getent passwd "$name" | cut -d: -f6)"
	local ws="$home/demo-project"
	if [ ! -d "$ws/.git" ]; then
		say "creating the demo Git workspace $ws"
		as_root runuser -u "$name" -- sh -c "
			set -e
			mkdir -p '$ws' && cd '$ws'
			git init -q -b main
			printf '# Demo project\n\nEdited by an agent in the Lazaret sandbox.\n' > README.md
			printf 'hello:\n\t@echo hello from \$\$(hostname)\n' > Makefile
			git add . && git -c user.name=Demo -c user.email=demo@lazaret.invalid commit -qm 'Demo project'
			git config user.name 'Lazaret Demo' && git config user.email demo@lazaret.invalid
		"
	fi
	echo "$ws"
}

kernel() {
	local bin="${LAZARET_BIN:-$here/bin}"
	[ -x "$bin/lazaret" ] || die "$bin/lazaret is not built: run make build"
	local args=(kernel qualify --if-needed)
	[ "${1:-}" = --force ] && args=(kernel qualify)
	# As root the record is system-wide, for every user of this machine.
	"$bin/lazaret" "${args[@]}" || die "the kernel qualification suite failed (its output is above): Lazaret cannot run on this kernel build"
}

# test_debs: the real Debian packages of jq (and what it depends on) as a
# flat apt repository, for the identity integration test: it serves them
# from a test host in a network namespace and installs them with apt inside
# the sandbox, so no test traffic leaves the machine. Downloaded once from
# this machine's configured Debian mirror.
test_debs() {
	local dir=/var/cache/lazaret/test-debs
	if [ -s "$dir/Packages" ]; then return 0; fi
	command -v apt-get >/dev/null || die "test-debs needs apt-get (a Debian or Ubuntu host)"
	as_root mkdir -p "$dir.tmp"
	( cd "$dir.tmp" && as_root apt-get download jq libjq1 libonig5 ) >&2 ||
		{ as_root apt-get update >&2 && ( cd "$dir.tmp" && as_root apt-get download jq libjq1 libonig5 ) >&2; } ||
		die "apt-get download jq libjq1 libonig5 failed: check this machine's apt sources (apt-get update)"
	local f
	for f in "$dir.tmp"/*.deb; do
		dpkg-deb -f "$f"
		printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$(basename "$f")" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
	done | as_root tee "$dir.tmp/Packages" >/dev/null
	as_root chmod -R a+rX "$dir.tmp"
	as_root rm -rf "$dir"
	as_root mv "$dir.tmp" "$dir"
	say "test packages in $dir"
}

# java_major prints the major version of `java` on PATH (0 when absent).
java_major() {
	local v
	v="$(java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\)[."].*/\1/p' | head -n1)"
	printf '%s\n' "${v:-0}"
}

# tlc makes `make tlc` possible: a Java runtime of version 11 or later
# (TLC's minimum) from the distribution's packages, and tla2tools.jar. It
# prints the jar's path on standard output.
tlc() {
	if [ "$(java_major)" -lt 11 ]; then
		install_step tlc
		[ "$(java_major)" -ge 11 ] || die "java $(java_major) after installing the tlc packages: TLC needs Java 11 or later on PATH"
	fi
	if [ -n "${TLA2TOOLS_JAR:-}" ]; then
		[ -r "$TLA2TOOLS_JAR" ] || die "TLA2TOOLS_JAR=$TLA2TOOLS_JAR is not a readable file"
		case "$(unzip -Z1 "$TLA2TOOLS_JAR" 2>/dev/null)" in
		*tlc2/TLC.class*) ;;
		*) die "TLA2TOOLS_JAR=$TLA2TOOLS_JAR has no tlc2/TLC.class: point it at tla2tools.jar" ;;
		esac
		say "using TLA2TOOLS_JAR=$TLA2TOOLS_JAR (sha256 $(sha256sum "$TLA2TOOLS_JAR" | cut -d' ' -f1))"
		printf '%s\n' "$TLA2TOOLS_JAR"
		return
	fi
	local jar="$TLA2TOOLS_DIR/tla2tools.jar"
	if [ ! -r "$jar" ]; then
		command -v mvn >/dev/null || die "tla2tools.jar is not cached in $TLA2TOOLS_DIR and mvn is not installed to fetch org.lamport:tla2tools:$TLA2TOOLS_VERSION: install maven, or set TLA2TOOLS_JAR=/path/to/tla2tools.jar"
		local tmp; tmp="$(mktemp -d)"
		say "fetching org.lamport:tla2tools:$TLA2TOOLS_VERSION with mvn"
		if ! (cd "$tmp" && mvn -B -q dependency:copy -Dartifact="org.lamport:tla2tools:$TLA2TOOLS_VERSION" -DoutputDirectory="$tmp/out" >&2); then
			rm -rf "$tmp"
			die "mvn could not fetch org.lamport:tla2tools:$TLA2TOOLS_VERSION (is the Maven registry reachable from this machine?): set TLA2TOOLS_JAR=/path/to/tla2tools.jar to use a jar obtained otherwise"
		fi
		local got; got="$(sha256sum "$tmp/out/tla2tools-$TLA2TOOLS_VERSION.jar" | cut -d' ' -f1)"
		if [ -z "$TLA2TOOLS_SHA256" ] || [ "$got" != "$TLA2TOOLS_SHA256" ]; then
			rm -rf "$tmp"
			die "org.lamport:tla2tools:$TLA2TOOLS_VERSION has sha256 $got, pinned ${TLA2TOOLS_SHA256:-nothing}: check the jar and set TLA2TOOLS_SHA256 in scripts/setup.sh"
		fi
		as_root mkdir -p "$TLA2TOOLS_DIR"
		as_root install -m 0644 "$tmp/out/tla2tools-$TLA2TOOLS_VERSION.jar" "$jar"
		rm -rf "$tmp"
	fi
	printf '%s\n' "$jar"
}

# bench_deps installs what `make bench` compares Lazaret with: srt's
# dependencies from the table, then the pinned srt from the npm registry
# into $SRT_DIR (once). It prints the srt executable's path on standard
# output.
bench_deps() {
	install_step bench-deps
	command -v npm >/dev/null || die "npm is not on PATH after installing the bench-deps packages: install Node.js and npm"
	local srt="$SRT_DIR/node_modules/.bin/srt"
	if [ ! -x "$srt" ]; then
		say "installing $SRT_PACKAGE@$SRT_VERSION from the npm registry into $SRT_DIR"
		as_root mkdir -p "$SRT_DIR"
		as_root npm install --prefix "$SRT_DIR" --no-audit --no-fund --loglevel=error "$SRT_PACKAGE@$SRT_VERSION" >&2 ||
			die "npm install $SRT_PACKAGE@$SRT_VERSION failed (is the npm registry reachable from this machine?)"
		[ -x "$srt" ] || die "$SRT_PACKAGE@$SRT_VERSION installed no $srt"
	fi
	# The bench runs srt as the non-root test user.
	as_root chmod -R a+rX "$DEPS_DIR/srt"
	printf '%s\n' "$srt"
}

# bench_npm fills an npm cache with the packages of the bench's npm project
# (integration/testdata/npm-project: its lock file pins 175 packages, none
# with install scripts) from the npm registry, once per lock file. It is the
# local mirror both sides of `make bench`'s npm install figure install from
# with --offline, so the figure is the install's own work, not the
# registry's. It prints the cache's path on standard output.
bench_npm() {
	install_step bench-deps
	command -v npm >/dev/null || die "npm is not on PATH after installing the bench-deps packages: install Node.js and npm"
	local proj="$here/integration/testdata/npm-project"
	local sum; sum="$(sha256sum "$proj/package-lock.json" | cut -c1-16)"
	local dir="$DEPS_DIR/npm-bench/$sum"
	if [ ! -f "$dir/complete" ]; then
		say "fetching the npm bench project's packages from the npm registry into $dir/cache"
		as_root rm -rf "$dir"
		as_root mkdir -p "$dir/project"
		as_root cp "$proj/package.json" "$proj/package-lock.json" "$dir/project/"
		as_root npm ci --prefix "$dir/project" --cache "$dir/cache" --ignore-scripts --no-audit --no-fund --loglevel=error >&2 ||
			die "npm ci of $proj failed (is the npm registry reachable from this machine?)"
		as_root rm -rf "$dir/project"
		as_root touch "$dir/complete"
	fi
	# The bench copies the cache as the non-root test user.
	as_root chmod -R a+rX "$dir"
	printf '%s\n' "$dir/cache"
}

cmd="${1:-}"; shift || true
case "$cmd" in
deps) deps ;;
packages) packages "$@" ;;
user) user "$@" ;;
images) images "$@" ;;
demo-workspace) demo_workspace "$@" ;;
kernel) kernel "$@" ;;
test-debs) test_debs ;;
protoc) install_step protoc ;;
tlc) tlc ;;
bench-deps) bench_deps ;;
bench-npm) bench_npm ;;
*) die "usage: $0 deps | packages [MANAGER] | user NAME | images NAME KIND... | demo-workspace NAME | kernel [--force] | test-debs | protoc | tlc | bench-deps | bench-npm" ;;
esac
