#!/usr/bin/env bash
# A stock Debian 12 kernel under QEMU, for what this machine's kernel cannot show:
# real IPVS (this kernel has none) and "the agent never loads a kernel module"
# (this kernel has CONFIG_MODULES=n). docs/testing.md, "The VM layer", says what each
# scenario proves; tests/vm/vm_kernel.rs boots them and checks what they print.
#
#   bash tests/vm/vm.sh SCENARIO [BIN]        by hand: build around BIN (default
#                                             target/debug/proxywatch), boot SCENARIO,
#                                             print the path of its serial log
#   bash tests/vm/vm.sh build BIN OUTDIR      OUTDIR/vmlinux + OUTDIR/initrd.gz
#   bash tests/vm/vm.sh boot OUTDIR SCENARIO  boot; the serial log goes to
#                                             OUTDIR/SCENARIO.log (raw: .serial.log)
#   bash tests/vm/vm.sh scenarios             the scenario names
#
# The kernel is Debian's linux-image-6.1.0-N-amd64 (the one linux-image-amd64 depends
# on, else the newest apt-cache knows), fetched with `apt-get download` and unpacked
# with `dpkg-deb` (never installed), cached in $PROXYWATCH_VM_CACHE (default
# /var/cache/proxywatch-vm as root, else ~/.cache/proxywatch-vm): the uncompressed
# vmlinux, the netfilter/IPVS modules with their depmod files, the kernel config.
# The initramfs holds busybox-static, those modules, ipvsadm, ip, iptables (legacy
# and nft), nft, conntrack, socat, bash (its /dev/udp: a UDP client that keeps its source
# port), the agent, and the shared libraries ldd lists for them.
#
# Environment: PROXYWATCH_VM_ACCEL=tcg|kvm (default: kvm only where /dev/kvm exists
# and the CPU has vmx/svm; the paravirtual /dev/kvm of some machines crawls),
# PROXYWATCH_VM_TIMEOUT (seconds per boot, default 300).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SCENARIOS=(ipvs ipvs-unloaded legacy-only ipvs-leftover ipvs-stale ipvs-lingering ipvs-service-traffic neighbour
    conntrack-full conntrack-first-drop)

die() {
    echo "vm.sh: $*" >&2
    exit 1
}

cache_dir() {
    if [ -n "${PROXYWATCH_VM_CACHE:-}" ]; then
        echo "$PROXYWATCH_VM_CACHE"
    elif [ "$(id -u)" = 0 ]; then
        echo /var/cache/proxywatch-vm
    else
        echo "${XDG_CACHE_HOME:-$HOME/.cache}/proxywatch-vm"
    fi
}

# The kernel package: what linux-image-amd64 depends on when that is a 6.1.0 image
# (Debian 12), else the newest linux-image-6.1.0-N-amd64 apt-cache knows.
kernel_package() {
    local pkg
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-6\.1\.0-[0-9]+-amd64$/ {print $2; exit}')
    if [ -z "$pkg" ]; then
        pkg=$(apt-cache pkgnames linux-image-6.1.0- 2>/dev/null |
            grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -1 || true)
    fi
    echo "$pkg"
}

# The newest cached kernel, if any.
cached_kernel() {
    local dir
    dir=$(find "$(cache_dir)" -mindepth 1 -maxdepth 1 -type d -name 'linux-image-*-2' 2>/dev/null | sort -V | tail -1)
    [ -n "$dir" ] && [ -f "$dir/ready" ] && echo "$dir"
}

# Fills the cache with one kernel and prints its directory. With stale or no apt
# lists, `apt-get update` once; offline, the newest cached kernel is used.
ensure_kernel() {
    local cache pkg ver dir try
    cache=$(cache_dir)
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    flock 9
    for try in 1 2; do
        pkg=$(kernel_package)
        ver=""
        [ -n "$pkg" ] && ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
        if [ -n "$ver" ]; then
            # -2: the layout with net/sched's netem (an older cache lacks it: fetched anew).
            dir="$cache/${pkg}_${ver}-2"
            if [ -f "$dir/ready" ] || fetch_kernel "$pkg" "$ver" "$dir"; then
                echo "$dir"
                return
            fi
        fi
        [ "$try" = 1 ] && [ "$(id -u)" = 0 ] && { apt-get update -qq >&2 || true; }
    done
    dir=$(cached_kernel) || die "could not fetch linux-image-6.1.0-*-amd64 and nothing is cached in $cache"
    echo "vm.sh: using the cached $(basename "$dir")" >&2
    echo "$dir"
}

# fetch_kernel PKG VERSION DIR: download, unpack what the guest uses into DIR.
# Called as a condition (errexit is off there), so each step checks itself.
fetch_kernel() {
    local pkg=$1 ver=$2 dir=$3 tmp deb off rel cache
    cache=$(dirname "$dir")
    echo "vm.sh: fetching $pkg $ver into $cache" >&2
    tmp="$dir.tmp"
    rm -rf "$dir" "$tmp"
    mkdir -p "$tmp/x"
    # apt-get download writes as _apt when it can: let it.
    chmod 777 "$tmp"
    (cd "$tmp" && apt-get download -qq "$pkg=$ver" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
    deb=$(ls "$tmp"/*.deb 2>/dev/null | head -1)
    if [ -z "$deb" ]; then
        echo "vm.sh: apt-get download $pkg=$ver fetched nothing" >&2
        rm -rf "$tmp"
        return 1
    fi
    # Only what the guest uses: the kernel, its config, the netfilter and IPVS modules.
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards \
        './boot/vmlinuz-*' './boot/config-*' \
        './lib/modules/*/modules.builtin' './lib/modules/*/modules.builtin.modinfo' './lib/modules/*/modules.order' \
        './lib/modules/*/kernel/net/netfilter/*' \
        './lib/modules/*/kernel/net/ipv4/netfilter/*' './lib/modules/*/kernel/net/ipv6/netfilter/*' \
        './lib/modules/*/kernel/drivers/net/dummy.ko' './lib/modules/*/kernel/net/sched/sch_netem.ko' \
        './lib/modules/*/kernel/lib/libcrc32c.ko' './lib/modules/*/kernel/crypto/crc32c_generic.ko' ||
        die "unpacking $deb failed"
    rm -f "$deb"
    rel=$(ls "$tmp/x/lib/modules")
    [ -n "$rel" ] && [ -f "$tmp/x/boot/vmlinuz-$rel" ] || die "unexpected layout in $pkg"
    if [ -n "$(find "$tmp/x/lib/modules" -name '*.ko.*' -print -quit)" ]; then
        die "$pkg ships compressed modules; busybox insmod in the guest needs plain .ko"
    fi
    # The vmlinuz payload is xz: boot the uncompressed ELF (PVH), twice as fast.
    # grep may die of SIGPIPE once head has its line: not a failure (pipefail).
    off=$({ LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$tmp/x/boot/vmlinuz-$rel" || true; } | head -1 | cut -d: -f1)
    [ -n "$off" ] || die "no xz payload in vmlinuz-$rel"
    # (tail gets SIGPIPE when xz stops at the end of the stream.)
    (tail -c +"$((off + 1))" "$tmp/x/boot/vmlinuz-$rel" || true) | xz -dc --single-stream >"$tmp/vmlinux" ||
        die "decompressing vmlinuz-$rel failed"
    [ "$(head -c 4 "$tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || die "vmlinux from vmlinuz-$rel is no ELF"
    mkdir -p "$tmp/modules"
    mkdir -p "$tmp/root/lib/modules"
    mv "$tmp/x/lib/modules/$rel" "$tmp/root/lib/modules/" || die "moving the modules failed"
    mv "$tmp/x/boot/config-$rel" "$tmp/config" || die "no config-$rel"
    echo "$rel" >"$tmp/release"
    rm -rf "$tmp/x"
    # The package ships no modules.dep: make one for the modules kept.
    depmod -b "$tmp/root" "$rel" || die "depmod failed"
    [ -s "$tmp/root/lib/modules/$rel/modules.dep" ] || die "depmod made no modules.dep"
    echo "$pkg $ver" >"$tmp/package"
    touch "$tmp/ready"
    # Keep one kernel: drop older ones.
    find "$cache" -mindepth 1 -maxdepth 1 -type d -name 'linux-image-*' ! -name "$(basename "$tmp")" -exec rm -rf {} +
    mv "$tmp" "$dir"
}

# Copies a binary and the shared libraries ldd lists for it into the root.
copy_libs() {
    local root=$1 bin=$2 lib
    for lib in $(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        if [ ! -e "$root$lib" ]; then
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        fi
    done
}

need() {
    local t missing=()
    for t in "$@"; do
        command -v "$t" >/dev/null || missing+=("$t")
    done
    [ ${#missing[@]} = 0 ] || die "missing tools: ${missing[*]} (tests/run.sh installs them)"
}

build() {
    local bin=$1 out=$2 kdir rel root t real
    need qemu-system-x86_64 busybox cpio gzip xz depmod apt-get dpkg-deb ldd strip ipvsadm ip \
        xtables-legacy-multi xtables-nft-multi nft conntrack socat tc
    [ -x "$bin" ] || die "no agent binary at $bin"
    kdir=$(ensure_kernel)
    rel=$(cat "$kdir/release")
    mkdir -p "$out"
    root="$out/root"
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,usr/sbin,usr/bin,usr/lib/pw,etc,proc,sys,dev,run,tmp,boot,lib64}
    # busybox: the guest's shell and small tools. Applets are called by name from
    # /bin; the real ip is /usr/sbin/ip (busybox's `ip` applet would shadow it in sh).
    cp "$(command -v busybox)" "$root/bin/busybox"
    for t in sh cat echo printf sleep mount mkdir ls rm mv cp ln grep sed awk wc sort uniq \
        head tail tr sysctl insmod lsmod poweroff wget nc kill seq test date cmp uname \
        env timeout touch true false dmesg sync stat chmod find xargs cut od dd; do
        ln -s busybox "$root/bin/$t"
    done
    # bash for one thing busybox lacks: a UDP socket held open (/dev/udp), so a
    # client keeps its source port and its conntrack entry. Not /bin/bash: the
    # guest's sh stays busybox.
    cp "$(command -v bash)" "$root/usr/bin/bash"
    copy_libs "$root" "$root/usr/bin/bash"
    # The kernel's module requests (CONFIG_MODPROBE_PATH=/sbin/modprobe) are logged,
    # then served by busybox modprobe from modules.dep/modules.alias.
    cat >"$root/sbin/modprobe" <<'EOF'
#!/bin/sh
echo "modprobe $*" >> /run/modprobe.log
exec /bin/busybox modprobe "$@"
EOF
    chmod 755 "$root/sbin/modprobe"
    # The tools the agent may run: each a wrapper that logs its argv to
    # /run/exec.log, then execs the real binary under its own name (the
    # xtables multi-binaries dispatch on argv[0]).
    for t in ipvsadm ip xtables-legacy-multi xtables-nft-multi nft conntrack; do
        real=$(command -v "$t")
        cp "$real" "$root/usr/lib/pw/$t.bin"
        copy_libs "$root" "$real"
    done
    wrap() { # name target
        ln -s "$2.bin" "$root/usr/lib/pw/$1"
        printf '#!/bin/sh\necho "%s $*" >> /run/exec.log\nexec /usr/lib/pw/%s "$@"\n' "$1" "$1" >"$root/usr/sbin/$1"
        chmod 755 "$root/usr/sbin/$1"
    }
    wrap ipvsadm ipvsadm
    wrap nft nft
    wrap conntrack conntrack
    for t in iptables ip6tables; do
        for s in "" -save -restore; do
            wrap "$t-legacy$s" xtables-legacy-multi
            wrap "$t-nft$s" xtables-nft-multi
        done
    done
    # ip is not wrapped: the scenarios use it a lot and the agent never runs it.
    rm -f "$root/usr/lib/pw/ip"
    mv "$root/usr/lib/pw/ip.bin" "$root/usr/sbin/ip"
    mkdir -p "$root/usr/lib/x86_64-linux-gnu"
    cp -r /usr/lib/x86_64-linux-gnu/xtables "$root/usr/lib/x86_64-linux-gnu/"
    for t in /usr/lib/x86_64-linux-gnu/xtables/*.so; do copy_libs "$root" "$t"; done
    cp /etc/protocols /etc/services "$root/etc/" 2>/dev/null || true
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    # The agent, without debug info (a third of the size).
    strip -o "$root/usr/bin/proxywatch" "$bin"
    copy_libs "$root" "$bin"
    # Kernel side: modules with depmod's files, modules.builtin, the config (HZ).
    cp -r "$kdir/root/lib/modules" "$root/lib/"
    cp "$kdir/config" "$root/boot/config-$rel"
    # socat for the DNS servers behind a Service (UDP and TCP; busybox's nc has no UDP),
    # each query answered by guest/dns-answer.
    cp "$(command -v socat)" "$root/usr/bin/socat"
    copy_libs "$root" "$root/usr/bin/socat"
    cp "$HERE/guest/dns-answer" "$root/usr/lib/pw/dns-answer"
    # tc, for netem's delay on a link (the agent never runs it).
    cp "$(command -v tc)" "$root/usr/sbin/tc"
    copy_libs "$root" "$root/usr/sbin/tc"
    chmod 755 "$root/usr/lib/pw/dns-answer"
    cp "$HERE/guest/init" "$root/init"
    cp "$HERE/guest/scenarios.sh" "$root/scenarios.sh"
    chmod 755 "$root/init"
    (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -1 >"$out/initrd.gz.tmp"
    mv "$out/initrd.gz.tmp" "$out/initrd.gz"
    ln -sf "$kdir/vmlinux" "$out/vmlinux"
    cat "$kdir/package" >"$out/kernel-package"
    rm -rf "$root"
}

accel() {
    case "${PROXYWATCH_VM_ACCEL:-}" in
    tcg | kvm) echo "$PROXYWATCH_VM_ACCEL" ;;
    "")
        if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then echo kvm; else echo tcg; fi
        ;;
    *) die "PROXYWATCH_VM_ACCEL must be tcg or kvm" ;;
    esac
}

boot() {
    local out=$1 scenario=$2 raw log acc cpu rc=0
    [ -f "$out/initrd.gz" ] && [ -e "$out/vmlinux" ] || die "build first: no $out/initrd.gz or vmlinux"
    # Not `printf | grep -q`: grep quits at the first match, printf may then die of SIGPIPE,
    # and pipefail turns a known scenario into "unknown" (seen once in CI, for legacy-only).
    [[ " ${SCENARIOS[*]} " == *" $scenario "* ]] || die "unknown scenario $scenario (${SCENARIOS[*]})"
    raw="$out/$scenario.serial.log"
    log="$out/$scenario.log"
    acc=$(accel)
    cpu=max
    [ "$acc" = kvm ] && cpu=host
    timeout --kill-after=10 "${PROXYWATCH_VM_TIMEOUT:-300}" \
        qemu-system-x86_64 -accel "$acc" -cpu "$cpu" -m 512 -smp 1 -nographic -no-reboot -nic none \
        -kernel "$out/vmlinux" -initrd "$out/initrd.gz" \
        -append "console=ttyS0 panic=-1 quiet pw.scenario=$scenario" \
        </dev/null >"$raw" 2>&1 || rc=$?
    # The console adds \r and terminal escapes; the test reads the clean copy.
    sed -e 's/\r//g' -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' "$raw" >"$log"
    [ "$rc" = 0 ] || die "qemu exited with $rc (124: timed out); serial log: $log"
    echo "$log"
}

case "${1:-}" in
build)
    [ $# = 3 ] || die "usage: vm.sh build BIN OUTDIR"
    build "$(realpath "$2")" "$3"
    ;;
boot)
    [ $# = 3 ] || die "usage: vm.sh boot OUTDIR SCENARIO"
    boot "$2" "$3"
    ;;
scenarios) printf '%s\n' "${SCENARIOS[@]}" ;;
"" | -h | --help) sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
*)
    out="$REPO/target/vm"
    build "$(realpath "${2:-$REPO/target/debug/proxywatch}")" "$out"
    boot "$out" "$1"
    ;;
esac
