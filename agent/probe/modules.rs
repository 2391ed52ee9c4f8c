//! Kernel modules kube-proxy needs: loaded, built in, or missing.
//!
//! Sources, in order: `/proc/modules` (loaded), `/lib/modules/<release>/modules.builtin`
//! (built in), `/sys/module/<name>` without a `/proc/modules` entry (built in; only
//! built-ins with parameters appear there), and a file the module itself creates
//! (e.g. `/proc/net/ip_vs`), which proves it is active on kernels that have neither
//! `/proc/modules` nor `/lib/modules` (CONFIG_MODULES=n).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Deadline, ProbeContext, ProbeError, ProbeName, Probed};
use crate::host::Host;
use crate::parse::{quote, ParseError};

/// The modules watched, and a file that exists only while each is active.
pub const WATCHED: &[(&str, Option<&str>)] = &[
    ("ip_vs", Some("/proc/net/ip_vs")),
    ("ip_vs_rr", None),
    ("ip_vs_wrr", None),
    ("ip_vs_sh", None),
    ("nf_conntrack", Some("/proc/sys/net/netfilter/nf_conntrack_max")),
    ("br_netfilter", Some("/proc/sys/net/bridge/bridge-nf-call-iptables")),
];

/// The IPVS modules kube-proxy's IPVS mode requires.
pub const IPVS_MODULES: &[&str] = &["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleState {
    /// Listed in `/proc/modules`.
    Loaded,
    /// Compiled into the kernel.
    Builtin,
    /// Neither loaded nor built in.
    Missing,
}

impl ModuleState {
    pub fn is_present(self) -> bool {
        self != ModuleState::Missing
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleFacts {
    /// Kernel release, from `/proc/sys/kernel/osrelease`.
    pub kernel_release: Option<String>,
    /// State of each watched module.
    pub modules: BTreeMap<String, ModuleState>,
    /// Which sources existed on this node (e.g. `/proc/modules`), so a reader can
    /// tell "missing" from "could not tell".
    pub sources: Vec<String>,
}

/// Module names in `/proc/modules`: `name size refcount deps state address`.
pub fn parse_proc_modules(source: &str, text: &str) -> Result<BTreeSet<String>, ParseError> {
    let mut names = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 || fields[1].parse::<u64>().is_err() || !valid_module_name(fields[0]) {
            return Err(ParseError::new(
                source,
                i + 1,
                format!("expected `name size refcount ...`, found {}", quote(line)),
            ));
        }
        names.insert(fields[0].to_string());
    }
    Ok(names)
}

/// Module names in `modules.builtin`: one path per line, `kernel/net/netfilter/ipvs/ip_vs.ko`.
/// Names are normalised like modprobe does (`-` becomes `_`).
pub fn parse_modules_builtin(source: &str, text: &str) -> Result<BTreeSet<String>, ParseError> {
    let mut names = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let base = line.rsplit('/').next().unwrap_or(line);
        let Some(name) = base.strip_suffix(".ko") else {
            return Err(ParseError::new(
                source,
                i + 1,
                format!("expected a path ending in .ko, found {}", quote(line)),
            ));
        };
        let name = name.replace('-', "_");
        if !valid_module_name(&name) {
            return Err(ParseError::new(
                source,
                i + 1,
                format!("bad module name {}", quote(&name)),
            ));
        }
        names.insert(name);
    }
    Ok(names)
}

fn valid_module_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What the host shows, gathered by the probe; kept separate so the decision is pure.
#[derive(Debug, Default)]
pub struct ModuleSources {
    pub loaded: Option<BTreeSet<String>>,
    pub builtin: Option<BTreeSet<String>>,
    pub sys_module: Option<BTreeSet<String>>,
    /// Watched modules whose own file exists.
    pub active_files: BTreeSet<String>,
}

/// Decides each watched module's state from what the host shows.
pub fn decide(src: &ModuleSources) -> BTreeMap<String, ModuleState> {
    let has = |set: &Option<BTreeSet<String>>, m: &str| set.as_ref().is_some_and(|s| s.contains(m));
    WATCHED
        .iter()
        .map(|(m, _)| {
            let state = if has(&src.loaded, m) {
                ModuleState::Loaded
            } else if has(&src.builtin, m) || has(&src.sys_module, m) || src.active_files.contains(*m) {
                ModuleState::Builtin
            } else {
                ModuleState::Missing
            };
            (m.to_string(), state)
        })
        .collect()
}

/// The probe: reads the files on the blocking pool, behind the hang guard.
pub async fn probe(ctx: &ProbeContext, _deadline: Deadline) -> Result<Probed<ModuleFacts>, ProbeError> {
    let host = ctx.host.clone();
    super::blocking(ProbeName::Modules, move || read(&host).map(Probed::Present)).await
}

/// Reads every source of module state the host has.
pub fn read(host: &Host) -> Result<ModuleFacts, ProbeError> {
    let release = host
        .read_optional("/proc/sys/kernel/osrelease")?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains('/'));
    let mut sources = Vec::new();
    let mut src = ModuleSources::default();
    if let Some(text) = host.read_optional("/proc/modules")? {
        src.loaded = Some(parse_proc_modules(
            &host.path("/proc/modules").display().to_string(),
            &text,
        )?);
        sources.push("/proc/modules".to_string());
    }
    if let Some(rel) = &release {
        let p = format!("/lib/modules/{rel}/modules.builtin");
        if let Some(text) = host.read_optional(&p)? {
            src.builtin = Some(parse_modules_builtin(&host.path(&p).display().to_string(), &text)?);
            sources.push(p);
        }
    }
    if let Some(entries) = host.list_dir("/sys/module")? {
        src.sys_module = Some(entries.into_iter().collect());
        sources.push("/sys/module".to_string());
    }
    for (m, file) in WATCHED {
        if let Some(f) = file {
            if host.exists(f) {
                src.active_files.insert(m.to_string());
            }
        }
    }
    Ok(ModuleFacts {
        kernel_release: release,
        modules: decide(&src),
        sources,
    })
}

// ---------------------------------------------------------------------------
// Would running a tool load a module?

/// Whether running a tool that needs `module` now would make the kernel load
/// it: the kernel loads modules (it has `/proc/modules`) and `module` is
/// neither loaded nor built in. `iptables-nft-save` and `nft` have the kernel
/// load `nf_tables` and `nfnetlink` through its module requests, `conntrack -S`
/// `nf_conntrack_netlink`, `ipvsadm` `ip_vs`: a read-only agent must not.
///
/// A tool talks to the running kernel, so `/proc/modules` and `/sys/module`
/// are read where [`Host::kernel_files`] says: at `/` whatever `--host-root` says
/// (both are the same for every container on the node), or a recorded fixture node's
/// own, so that the answer does not depend on the machine the test runs on;
/// `modules.builtin` is looked for under the host root, then there. When nothing
/// tells, the answer is yes: better not run the tool than load a module.
pub fn tool_would_load(host: &Host, module: &str) -> bool {
    let kernel = host.kernel_files();
    let proc_modules = kernel.read_optional("/proc/modules").ok();
    let in_sys_module = kernel.exists(&format!("/sys/module/{module}"));
    let builtin = kernel
        .read_optional("/proc/sys/kernel/osrelease")
        .ok()
        .flatten()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains('/'))
        .map(|release| format!("/lib/modules/{release}/modules.builtin"))
        .and_then(|p| [host, &kernel].iter().find_map(|h| h.read_optional(&p).ok().flatten()));
    would_load(proc_modules, in_sys_module, builtin.as_deref(), module)
}

/// The decision of [`tool_would_load`]: `proc_modules` is `Some(None)` when
/// `/proc/modules` does not exist (no module support), `None` when it could
/// not be read.
pub fn would_load(
    proc_modules: Option<Option<String>>,
    in_sys_module: bool,
    builtin: Option<&str>,
    module: &str,
) -> bool {
    let loaded = match proc_modules {
        // CONFIG_MODULES=n: nothing can be loaded.
        Some(None) => return false,
        Some(Some(text)) => parse_proc_modules("/proc/modules", &text).ok(),
        None => None,
    };
    if in_sys_module || loaded.is_some_and(|l| l.contains(module)) {
        return false;
    }
    let built_in = builtin
        .and_then(|text| parse_modules_builtin("modules.builtin", text).ok())
        .is_some_and(|names| names.contains(module));
    !built_in
}

#[cfg(test)]
mod tests {
    use super::*;

    // Rocky 8.6 k8s node with IPVS loaded (tests/fixtures/samples/SOURCES.md).
    const ROCKY: &str =
        include_str!("../../tests/fixtures/samples/proc-modules/rocky8.6-el8-4.18-k8s-node-ipvs-loaded-partial.txt");
    // jamescun/procfs testdata: kptr_restrict addresses, no ip_vs.
    const WIREGUARD: &str = include_str!(
        "../../tests/fixtures/samples/proc-modules/jamescun-procfs-testdata-wireguard-kptr-restricted.txt"
    );
    // Debian 12 cloud kernel: netfilter is modular, so none of ours is built in.
    const DEBIAN_BUILTIN: &str =
        include_str!("../../tests/fixtures/samples/modules-builtin/debian12-6.1.0-47-cloud-amd64.modules.builtin");
    // kubernetes pkg/proxy/ipvs/README.md: grep of a modules.builtin with IPVS built in.
    const K8S_BUILTIN: &str = include_str!(
        "../../tests/fixtures/samples/modules-builtin/kubernetes-ipvs-readme-grep-builtin-ipvs-excerpt.txt"
    );
    // This machine's kernel (CONFIG_MODULES=n): `ls -1 /sys/module`.
    const SYS_MODULE: &str =
        include_str!("../../tests/fixtures/samples/sys-module/debian12-kernel6.18-no-module-support-ls-sys-module.txt");

    #[test]
    fn proc_modules_real_samples() {
        let rocky = parse_proc_modules("rocky", ROCKY).unwrap();
        for m in [
            "ip_vs",
            "ip_vs_rr",
            "ip_vs_wrr",
            "ip_vs_sh",
            "nf_conntrack",
            "br_netfilter",
        ] {
            assert!(rocky.contains(m), "{m} missing from rocky sample");
        }
        let wg = parse_proc_modules("wg", WIREGUARD).unwrap();
        assert!(wg.contains("wireguard"));
        assert!(!wg.contains("ip_vs"));
    }

    #[test]
    fn proc_modules_garbage_names_the_line() {
        let err = parse_proc_modules("/proc/modules", "ip_vs 172032 6 - Live 0x0\nnot a module line\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(parse_proc_modules("/proc/modules", "ip_vs abc 0\n").is_err());
        assert!(parse_proc_modules("/proc/modules", "").unwrap().is_empty());
    }

    #[test]
    fn builtin_real_samples() {
        let deb = parse_modules_builtin("deb", DEBIAN_BUILTIN).unwrap();
        assert_eq!(
            deb.len(),
            DEBIAN_BUILTIN.lines().filter(|l| !l.trim().is_empty()).count()
        );
        assert!(!deb.contains("ip_vs") && !deb.contains("nf_conntrack"));
        let k8s = parse_modules_builtin("k8s", K8S_BUILTIN).unwrap();
        assert!(k8s.contains("ip_vs") && k8s.contains("ip_vs_rr") && k8s.contains("ip_vs_sh"));
        assert!(parse_modules_builtin("x", "kernel/foo.o\n").is_err());
    }

    #[test]
    fn this_kernel_without_module_support() {
        let sys: BTreeSet<String> = SYS_MODULE.lines().map(str::to_string).collect();
        let mut src = ModuleSources {
            sys_module: Some(sys),
            ..Default::default()
        };
        src.active_files.insert("br_netfilter".into());
        let states = decide(&src);
        assert_eq!(states["nf_conntrack"], ModuleState::Builtin);
        assert_eq!(states["br_netfilter"], ModuleState::Builtin);
        assert_eq!(states["ip_vs"], ModuleState::Missing);
        assert_eq!(states["ip_vs_sh"], ModuleState::Missing);
    }

    #[test]
    fn loaded_wins_over_sys_module() {
        let all: BTreeSet<String> = ["ip_vs".to_string()].into();
        let src = ModuleSources {
            loaded: Some(all.clone()),
            sys_module: Some(all),
            ..Default::default()
        };
        assert_eq!(decide(&src)["ip_vs"], ModuleState::Loaded);
    }

    #[test]
    fn a_tool_would_load_a_module_only_when_modules_load_and_it_is_absent() {
        let lsmod = "nf_conntrack 188416 0 - Live 0x0\nnf_tables 307200 0 - Live 0x0\n";
        let builtin = "kernel/net/netfilter/nfnetlink.ko\n";
        // No /proc/modules: a kernel without module support loads nothing.
        assert!(!would_load(Some(None), false, None, "nf_tables"));
        // Loaded, listed in /sys/module, or built in: nothing to load.
        assert!(!would_load(Some(Some(lsmod.into())), false, None, "nf_tables"));
        assert!(!would_load(Some(Some(String::new())), true, None, "nf_tables"));
        assert!(!would_load(
            Some(Some(String::new())),
            false,
            Some(builtin),
            "nfnetlink"
        ));
        // Modular and not loaded: running the tool would load it.
        assert!(would_load(Some(Some(lsmod.into())), false, Some(builtin), "ip_vs"));
        // Nothing tells (unreadable /proc/modules, no modules.builtin): assume it would.
        assert!(would_load(None, false, None, "nf_tables"));
    }
}
