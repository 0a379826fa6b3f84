// Package config reads the trusted host configuration and its Agent Profiles
// (spec §1.1, §2 "Agent Profile", FR-9), validates it, derives each profile's
// Configuration Fingerprint, and checks configuration confinement.
//
// The configuration is a TOML file, by default
// $XDG_CONFIG_HOME/lazaret/config.toml (~/.config/lazaret/config.toml), or
// the file named by --config. With no file, the built-in profiles `default`
// (the locally built Debian image) and `tiny` (busybox) are available. The
// file has a [defaults] table, applied to every profile, and one
// [profiles.NAME] table per profile; docs/CONFIG.md describes every key.
//
// Layering of one effective profile, from lowest to highest precedence:
//
//	Lazaret defaults → [defaults] → built-in profile NAME → [profiles.NAME]
//
// Scalars (image, booleans) take the highest layer that sets them. Lists
// (persistent paths, network prefixes, DNS, auto-approve rules, volumes) are
// the union of [defaults] and the profile; env is merged by name, the profile
// winning. The built-in network denies are always part of the policy.
//
// Everything in this package is pure except Load (reads the file) and
// Confine (resolves paths on the host file system). Validation reports every
// problem at once, each with file:line:column and the fix.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Configuration and Agent Profiles
//
// `pkg/config` parses `~/.config/lazaret/config.toml` (or `--config`) into
// validated profiles (docs/CONFIG.md). The CLI validates, checks confinement
// (the file and every symlink on its path may not be inside or above a
// mounted path), and hands the Host Coordinator the profile's canonical bytes
// in a write-sealed memfd (`--profile-fd`); HC re-validates them. The
// Configuration Fingerprint is the SHA-256 of those canonical bytes: a joining
// CLI whose fingerprint differs is refused with `config.Diff`'s list of what
// changed. HC uses the profile for the guest environment, volumes (extra OCI
// binds that `ocispec.Check` accepts only exactly as declared) and the
// network policy.
//
// Credentials (`pkg/secretenv`). `env_pass` and `secrets` are names and
// sources in the profile, never values. The CLI resolves them on the host
// before it dials or starts a coordinator (`secretenv.Resolve`: variables
// with `os.LookupEnv`, a secret command through the CLI's one broker with
// the terminal's stdin and stderr, stdout captured, bounded), and sends the
// values in `RunRequest.credentials` over the mTLS control socket. HC checks
// the names against its profile after admission (`secretenv.Check`: no
// other name, none missing) and adds them to that session's process
// environment only (`guestEnv.session`); they are not in the base environment (the init,
// probes), not in any slog attribute, store record or status document. The
// session's process JSON (0600, runtime directory) holds them while it runs.
//
// Forwarded ports (`pkg/slirp` `AddHostFwd`, `pkg/hc/network`). The
// helper is started with `--api-socket` in the Domain's runtime directory
// (bound by slirp4netns before it enters its sandbox; the directory is
// 0700). After the helper's ready signal HC forwards the profile's `ports`
// (a failure fails the start); each RunRequest's `forward_ports` (`run -P`,
// canonical `ADDR:HOST:GUEST`, loopback only, checked again by HC) are
// forwarded after the generation is ready and before the session's command
// starts, for a start and a join alike, and last until the Domain stops.
// Before each `add_hostfwd` HC binds the host address once itself, so a port
// in use or a privileged one is reported as such (slirp4netns's own error
// does not say why). The forward targets the sandbox's tap address
// `10.0.2.100`, which gVisor's netstack owns; replies go back through the
// helper's connected /24, which no deny route covers. `lazaret status` shows
// `network.forwarded_ports`.
package config
