//! The bearer token that guards every endpoint but `/healthz`, read from a
//! file and re-read when the file changes, so a rotated token (a Kubernetes
//! Secret update, an atomic rename) takes effect without a restart.
//!
//! The file is looked at (`stat`) at most once per `recheck` interval and read
//! only when its identity or modification time changed. A file that turns
//! unreadable or empty keeps the last good token in force: a rotation caught
//! half-way must not open the endpoints, nor lock everyone out.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderValue;

/// How often the token file is looked at, at most.
pub const RECHECK: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("--web.bearer-token-file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("--web.bearer-token-file {path}: empty")]
    Empty { path: PathBuf },
}

/// What identifies one version of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.modified().ok(),
        }
    }
}

#[derive(Debug)]
struct State {
    token: Arc<str>,
    stamp: Option<Stamp>,
    checked: Instant,
}

#[derive(Debug)]
struct Inner {
    file: Option<PathBuf>,
    recheck: Duration,
    state: Mutex<State>,
}

/// A bearer token, fixed or followed in a file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct BearerToken(Arc<Inner>);

fn read_token(path: &Path) -> Result<(String, Stamp), TokenError> {
    let read = |source| TokenError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let text = std::fs::read_to_string(path).map_err(read)?;
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok((token, Stamp::of(&meta)))
}

impl BearerToken {
    /// A token that never changes (tests, embedding).
    pub fn fixed(token: &str) -> Self {
        BearerToken(Arc::new(Inner {
            file: None,
            recheck: RECHECK,
            state: Mutex::new(State {
                token: Arc::from(token),
                stamp: None,
                checked: Instant::now(),
            }),
        }))
    }

    /// Reads the token from `path` now (an error if unreadable or empty), and
    /// again whenever the file changes, looking at most every `recheck`.
    pub fn from_file(path: &Path, recheck: Duration) -> Result<Self, TokenError> {
        let (token, stamp) = read_token(path)?;
        Ok(BearerToken(Arc::new(Inner {
            file: Some(path.to_path_buf()),
            recheck,
            state: Mutex::new(State {
                token: Arc::from(token),
                stamp: Some(stamp),
                checked: Instant::now(),
            }),
        })))
    }

    /// The token in force, after looking at the file if it is due.
    fn current(&self) -> Arc<str> {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(path) = &self.0.file else {
            return state.token.clone();
        };
        if state.checked.elapsed() < self.0.recheck {
            return state.token.clone();
        }
        state.checked = Instant::now();
        let observed = std::fs::metadata(path).ok().map(|m| Stamp::of(&m));
        if observed == state.stamp {
            return state.token.clone();
        }
        // Changed (or gone): remember what was seen, so one change is read and
        // reported once, not at every look.
        state.stamp = observed;
        match read_token(path) {
            Ok((token, stamp)) => {
                if *token != *state.token {
                    tracing::info!(file = %path.display(), "bearer token file changed: the new token is in force");
                }
                state.token = Arc::from(token);
                state.stamp = Some(stamp);
            }
            Err(e) => tracing::warn!("{e}; the previous token stays in force"),
        }
        state.token.clone()
    }

    /// Whether an `Authorization` header carries this token: scheme `Bearer`
    /// in any case (RFC 7235), then the token, compared in constant time.
    pub fn accepts(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(given) = authorization.and_then(|v| v.to_str().ok()).and_then(bearer_credentials) else {
            return false;
        };
        let token = self.current();
        constant_time_eq(given.as_bytes(), token.as_bytes())
    }
}

/// The credentials of a `Bearer` authorization value, whatever the scheme's case.
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim_matches(' ');
    (!token.is_empty()).then_some(token)
}

/// Compares without an early exit, so the token cannot be guessed byte by byte from timings.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(v: &str) -> HeaderValue {
        HeaderValue::from_str(v).unwrap()
    }

    #[test]
    fn scheme_is_case_insensitive_token_is_not() {
        let t = BearerToken::fixed("s3cret");
        for ok in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret", "BeArEr  s3cret "] {
            assert!(t.accepts(Some(&header(ok))), "{ok}");
        }
        for bad in [
            "Bearer S3CRET",
            "Bearer s3cret2",
            "Bearer",
            "Bearer ",
            "Basic s3cret",
            "Bearers3cret",
            "s3cret",
            "",
        ] {
            assert!(!t.accepts(Some(&header(bad))), "{bad:?}");
        }
        assert!(!t.accepts(None));
    }

    #[test]
    fn a_rotated_file_takes_effect_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let t = BearerToken::from_file(&path, Duration::ZERO).unwrap();
        assert!(t.accepts(Some(&header("Bearer first"))));

        // Rotation the way the kubelet does it: a new file renamed over the old one.
        let next = dir.path().join("token.new");
        std::fs::write(&next, "second\n").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(t.accepts(Some(&header("Bearer second"))));
        assert!(!t.accepts(Some(&header("Bearer first"))));

        // Rewritten in place, same length: the modification time tells.
        std::fs::write(&path, "third!\n").unwrap();
        assert!(t.accepts(Some(&header("Bearer third!"))));

        // Caught half-way (empty, then gone): the last good token stays.
        std::fs::write(&path, "").unwrap();
        assert!(t.accepts(Some(&header("Bearer third!"))));
        std::fs::remove_file(&path).unwrap();
        assert!(t.accepts(Some(&header("Bearer third!"))));
        assert!(!t.accepts(Some(&header("Bearer "))));
        std::fs::write(&path, "fourth").unwrap();
        assert!(t.accepts(Some(&header("Bearer fourth"))));
    }

    #[test]
    fn the_file_is_looked_at_at_most_every_recheck() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first").unwrap();
        let t = BearerToken::from_file(&path, Duration::from_secs(3600)).unwrap();
        std::fs::write(&path, "second").unwrap();
        assert!(
            t.accepts(Some(&header("Bearer first"))),
            "not re-read before the interval"
        );
    }

    #[test]
    fn unreadable_or_empty_at_start_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert!(matches!(
            BearerToken::from_file(&path, RECHECK),
            Err(TokenError::Read { .. })
        ));
        std::fs::write(&path, " \n").unwrap();
        let e = BearerToken::from_file(&path, RECHECK).unwrap_err();
        assert!(matches!(e, TokenError::Empty { .. }), "{e}");
    }
}
