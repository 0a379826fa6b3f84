#!/usr/bin/env bash
# Runs TLC on the TLA+ models, each with its .cfg, and compares TLC's
# distinct-state count with the Go checker's on the same configuration
# (they must be equal: the Go transcription explores the same state graph).
#
#   scripts/tlc.sh [MODEL...]      MODEL: Lazaret, PreparedLower (default: both)
#
# Environment: TLC_MODE=safety drops the PROPERTIES section (invariants only;
# much faster), TLC_WORKERS (default 1), TLC_HEAP (default 2g), TLC_TIMEOUT
# in seconds per model (default 3600), TLA2TOOLS_JAR (see scripts/setup.sh tlc).
set -euo pipefail
cd "$(dirname "$0")/.."
jar="$(scripts/setup.sh tlc)"
mode="${TLC_MODE:-full}"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(Lazaret PreparedLower)
work="$(mktemp -d /tmp/lazaret-tlc.XXXXXX)"
trap 'rm -rf "$work"' EXIT
status=0
for m in "${models[@]}"; do
	case "$m" in
	Lazaret) pkg=./pkg/model/lazaret ;;
	PreparedLower) pkg=./pkg/model/preparedlower ;;
	*) echo "tlc: unknown model $m (Lazaret or PreparedLower)" >&2; exit 2 ;;
	esac
	cp "tla/$m.tla" "$work/"
	if [ "$mode" = safety ]; then
		# Keep everything but the PROPERTIES section.
		awk '/^PROPERTIES/{skip=1; next} skip && /^[ \t]+[A-Za-z]/{next} {skip=0; print}' "tla/$m.cfg" >"$work/$m.cfg"
	else
		cp "tla/$m.cfg" "$work/"
	fi
	echo "tlc: $m.tla with $m.cfg ($mode)"
	start=$(date +%s)
	rc=0
	(cd "$work" && timeout "${TLC_TIMEOUT:-3600}" java -XX:+UseParallelGC -Xmx"${TLC_HEAP:-2g}" -cp "$jar" tlc2.TLC \
		-workers "${TLC_WORKERS:-1}" -metadir "$work/states-$m" -config "$m.cfg" "$m.tla") >"$work/$m.out" 2>&1 || rc=$?
	grep -v '^Progress(' "$work/$m.out" | grep -E -v '^(Parsing file|Semantic processing|Linting of module)' || true
	tlc_distinct="$(sed -n 's/.* \([0-9][0-9]*\) distinct states found.*/\1/p' "$work/$m.out" | tail -n1)"
	if [ "$rc" -ne 0 ] || [ -z "$tlc_distinct" ]; then
		echo "tlc: FAIL: TLC exited $rc on $m after $(( $(date +%s) - start ))s (output above)" >&2
		status=1
		continue
	fi
	go_line="$(go test -count=1 -run '^TestModel$' -v "$pkg" -args -full -liveness=false | grep 'distinct states' || true)"
	go_distinct="$(printf '%s\n' "$go_line" | sed -n 's/.*: \([0-9][0-9]*\) distinct states.*/\1/p')"
	echo "tlc: $m: TLC $tlc_distinct distinct states in $(( $(date +%s) - start ))s; Go checker: ${go_line#*explore_test.go:[0-9]*: }"
	if [ "$tlc_distinct" != "$go_distinct" ]; then
		echo "tlc: FAIL: $m: TLC found $tlc_distinct distinct states, the Go checker $go_distinct: the transcription in $pkg and tla/$m.tla differ" >&2
		status=1
	fi
done
exit $status
