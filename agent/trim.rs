//! Gives the C library's freed memory back to the kernel after a publication.
//!
//! A probe run or a render allocates its peak (a rule set decoded, a body rendered) and frees
//! it; glibc keeps what was freed inside its heaps and returns by itself only the heap's top
//! (`M_TRIM_THRESHOLD`, mallopt(3)), so RSS stays near the highest peak so far rather than
//! what the agent holds. `malloc_trim(0)` walks every arena and hands the whole free pages
//! back (`MADV_DONTNEED`). It runs on the aggregator's task after a publication, at most once
//! per `--memory.trim-interval` (5 s). What it changes is measured in docs/benchmarks.md
//! ("Giving freed memory back"); memory the agent still holds, live or in pages shared with
//! live blocks, it cannot return.
//! On a C library without it (musl) this does nothing.
//!
//! [`settle_allocator`] holds glibc to the image's two arenas and fixed mmap threshold
//! (Dockerfile `ENV`) in a binary started without those variables, so that one built from
//! source holds its memory as the DaemonSet's does (docs/how-it-works.md, "The DaemonSet and the image").
//! The image also turns glibc's per-thread caches off (`GLIBC_TUNABLES`), which no mallopt(3)
//! parameter does: glibc reads that tunable only at start, so a binary run without it keeps them.

use std::time::{Duration, Instant};

/// Trims when the last trim is at least `every` old (`--memory.trim-interval`; None: never);
/// returns whether it did.
#[derive(Debug)]
pub struct Trimmer {
    every: Option<Duration>,
    last: Option<Instant>,
}

impl Trimmer {
    pub fn new(every: Option<Duration>) -> Self {
        Trimmer { every, last: None }
    }

    pub fn after_publication(&mut self, now: Instant) -> bool {
        let Some(every) = self.every else {
            return false;
        };
        if self.last.is_some_and(|l| now.duration_since(l) < every) {
            return false;
        }
        self.last = Some(now);
        release_freed_memory();
        true
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_freed_memory() {
    // SAFETY: malloc_trim(3) takes a pad size by value, touches only the allocator's own
    // state under its own locks, and has no precondition on the caller; the Rust global
    // allocator is the system one (this crate sets no other).
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_memory() {}

/// glibc's allocator settings the image gives by `ENV` (Dockerfile), each as the variable glibc
/// reads at start, and its `mallopt(3)` parameter and value.
pub const ALLOCATOR_SETTINGS: &[(&str, i32, i32)] = &[
    // Two arenas: glibc's default (one per thread that allocates, up to 8 per CPU, each
    // keeping its peak) let RSS creep as the runtime's blocking threads came and went.
    ("MALLOC_ARENA_MAX", M_ARENA_MAX, 2),
    // A fixed 128 KiB threshold (glibc's starting value, which it otherwise raises after each
    // large free): the probes' large transient buffers are mapped and returned whole.
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, 131_072),
];
const M_MMAP_THRESHOLD: i32 = -3;
const M_ARENA_MAX: i32 = -8;

/// Applies [`ALLOCATOR_SETTINGS`] to this process, each one whose variable the environment does
/// not set (that one glibc already took, and it stays), so that a binary run from a shell or a
/// systemd unit holds its memory as the image does. Called first in `main`, before any thread
/// starts.
pub fn settle_allocator() {
    settle_with(|var| std::env::var_os(var).is_some(), set);
}

/// The variables whose settings it applied (for the test).
fn settle_with(in_env: impl Fn(&str) -> bool, mut set: impl FnMut(i32, i32) -> bool) -> Vec<&'static str> {
    ALLOCATOR_SETTINGS
        .iter()
        .filter(|(var, _, _)| !in_env(var))
        .filter(|&&(_, param, value)| set(param, value))
        .map(|(var, _, _)| *var)
        .collect()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set(param: i32, value: i32) -> bool {
    // SAFETY: mallopt(3) takes two integers by value and changes only the allocator's own
    // parameters under its lock; both parameters exist in every glibc this builds against
    // (malloc.h), and an unknown one would return 0, not fail otherwise.
    unsafe { libc::mallopt(param, value) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set(_param: i32, _value: i32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_at_most_once_per_interval_and_never_at_zero() {
        let every = Duration::from_secs(5);
        let mut t = Trimmer::new(Some(every));
        let start = Instant::now();
        assert!(t.after_publication(start));
        assert!(!t.after_publication(start + every / 2));
        assert!(t.after_publication(start + every));
        assert!(!t.after_publication(start + every + every / 3));
        let mut never = Trimmer::new(None);
        assert!(!never.after_publication(start));
        assert!(!never.after_publication(start + every * 100));
    }

    #[test]
    fn the_image_s_allocator_settings_are_applied_but_where_the_environment_sets_one() {
        let mut applied = Vec::new();
        let said = settle_with(
            |v| v == "MALLOC_ARENA_MAX",
            |p, v| {
                applied.push((p, v));
                true
            },
        );
        assert_eq!(said, ["MALLOC_MMAP_THRESHOLD_"]);
        assert_eq!(applied, [(M_MMAP_THRESHOLD, 131_072)]);
        let mut applied = Vec::new();
        let said = settle_with(
            |_| false,
            |p, v| {
                applied.push((p, v));
                p == M_ARENA_MAX
            },
        );
        assert_eq!(said, ["MALLOC_ARENA_MAX"], "one glibc refused is not said applied");
        assert_eq!(applied, [(M_ARENA_MAX, 2), (M_MMAP_THRESHOLD, 131_072)]);
        // The values are the Dockerfile's ENV, word for word.
        let dockerfile = include_str!("../Dockerfile");
        let env = dockerfile
            .lines()
            .find(|l| l.starts_with("ENV MALLOC_"))
            .expect("the image's ENV line");
        for (var, _, value) in ALLOCATOR_SETTINGS {
            assert!(
                env.split_whitespace().any(|w| w == format!("{var}={value}")),
                "{var}={value} in {env}"
            );
        }
    }

    /// What the module is for: freed memory below the heap's top goes back to the kernel.
    /// Measured on this process's own RSS: many small blocks (kept below the top by a last
    /// one still held) freed, then trimmed.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_below_the_heap_top_leaves_the_resident_set() {
        fn rss_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        // 64 MiB in 4 KiB blocks (below the mmap threshold: from the heap), touched.
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|i| vec![(i % 251) as u8 + 1; 4096]).collect();
        let pin = vec![7u8; 4096]; // allocated last: above the freed blocks, so the top stays
        let held = rss_kib();
        blocks.clear();
        blocks.shrink_to_fit();
        let freed = rss_kib();
        release_freed_memory();
        let trimmed = rss_kib();
        assert_eq!(pin[0], 7);
        // Other tests of this binary allocate meanwhile: the margins are wide.
        assert!(
            freed + 16 * 1024 > held,
            "free alone already gave it back (nothing left to show): {held} -> {freed} KiB"
        );
        assert!(
            trimmed + 32 * 1024 < freed,
            "trim returned under 32 MiB: {held} -> {freed} -> {trimmed} KiB"
        );
    }
}
