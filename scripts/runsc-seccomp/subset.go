//go:build ignore

// This file joins the sentry's filter configuration package
// (gvisor.dev/gvisor/runsc/boot/filter/config) in the copy of the gVisor
// module that scripts/setup.sh builds runsc from, and the set-up script
// makes PrecompiledPrograms call lazaretPrecompiled on its option sets.
//
// gVisor's release precompiles every combination of platform, host
// network, directfs and the GPU, TPU and RDMA proxies (576 programs, over
// a minute of compilation on two cores). Lazaret never enables a device
// proxy, so only the option sets without one are precompiled: every
// platform, network and filesystem combination (24 programs).
package config

func lazaretPrecompiled(opts []Options) []Options {
	var kept []Options
	for _, o := range opts {
		if !o.NVProxy && !o.TPUProxy && !o.RDMAProxy {
			kept = append(kept, o)
		}
	}
	return kept
}
