//! Sets `PROXYWATCH_REVISION` for `proxywatch_build_info{revision}`: the variable itself when the
//! build environment sets it (a Docker build without `.git`: `--build-arg PROXYWATCH_REVISION`),
//! else `git rev-parse HEAD` when building from a git checkout, else nothing (the revision is then
//! the version). `PROXYWATCH_REVISION_FROM` says which, for the test that checks it.
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=PROXYWATCH_REVISION");
    if let Some(r) = std::env::var("PROXYWATCH_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
    {
        println!("cargo:rustc-env=PROXYWATCH_REVISION={}", r.trim());
        println!("cargo:rustc-env=PROXYWATCH_REVISION_FROM=env");
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    let Some(rev) = git(dir, &["rev-parse", "HEAD"]) else {
        return;
    };
    println!("cargo:rustc-env=PROXYWATCH_REVISION={rev}");
    println!("cargo:rustc-env=PROXYWATCH_REVISION_FROM=git");
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points to (a commit),
    // packed-refs (a gc). Only existing files: Cargo reruns every build for a missing one.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for w in watch {
        if let Some(p) = git(dir, &["rev-parse", "--path-format=absolute", "--git-path", &w]) {
            if Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
}
