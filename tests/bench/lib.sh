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

# image_env: sets IMAGE_ENV to the allocator settings the image gives the agent (the
# Dockerfile's `ENV MALLOC_...` line, word for word), for `env "${IMAGE_ENV[@]}" "$PW_BIN"`: the
# binary sets the two mallopt(3) ones itself, not GLIBC_TUNABLES (read by glibc only at start).
# Only the agents get them, not the tools they are compared with.
image_env() {
	local line
	line=$(grep -m1 '^ENV MALLOC_' "$ROOT/Dockerfile") || { echo "no ENV MALLOC_ line in the Dockerfile" >&2; exit 1; }
	# shellcheck disable=SC2034 # the caller's
	read -r -a IMAGE_ENV <<<"${line#ENV }"
}

# conntrack_max_at_least N: raises the kernel-wide nf_conntrack_max to N for this
# run when it is lower, saying so; conntrack_max_restore, from the EXIT trap, puts
# the old value back unless someone changed it since.
CT_MAX_FILE=/proc/sys/net/netfilter/nf_conntrack_max
CT_MAX_BEFORE=
CT_MAX_RAISED=
conntrack_max_at_least() {
	CT_MAX_BEFORE=$(cat "$CT_MAX_FILE")
	if ((CT_MAX_BEFORE < $1)); then
		echo "$1" >"$CT_MAX_FILE"
		CT_MAX_RAISED=$1
		echo "nf_conntrack_max raised from $CT_MAX_BEFORE to $1 for this run (restored on exit)" >&2
	else
		echo "nf_conntrack_max is $CT_MAX_BEFORE >= $1 needed: not changed" >&2
	fi
}
conntrack_max_restore() {
	[[ -n $CT_MAX_RAISED ]] || return 0
	if [[ $(cat "$CT_MAX_FILE") == "$CT_MAX_RAISED" ]]; then
		echo "$CT_MAX_BEFORE" >"$CT_MAX_FILE" && echo "nf_conntrack_max restored to $CT_MAX_BEFORE" >&2
	else
		echo "nf_conntrack_max is $(cat "$CT_MAX_FILE") now (set to $CT_MAX_RAISED by this script, $CT_MAX_BEFORE before): left as is" >&2
	fi
}
