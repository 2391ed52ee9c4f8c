# Shared by the scripts in tests/bench (sourced, never run): the checks every
# one of them starts with. Needs ROOT set to the repository root.

# need_root_and TOOL...: exits unless running as root with every TOOL on PATH.
need_root_and() {
	[[ $(id -u) -eq 0 ]] || { echo "needs root" >&2; exit 1; }
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }
	done
}

# pw_bin: sets PW_BIN to the release binary, building it when PW_BIN is unset.
pw_bin() {
	if [[ -z ${PW_BIN:-} ]]; then
		echo "building the release binary..." >&2
		(cd "$ROOT" && cargo build --release --quiet)
		PW_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/proxywatch"
	fi
	[[ -x $PW_BIN ]] || { echo "no binary at $PW_BIN" >&2; exit 1; }
}
