//! kube-proxy's `/proxyMode` body (port 10249): the bare mode string ([`parse_proxy_mode`] →
//! [`ProxyMode`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::parse::{quote, ParseError};

/// The name [`parse_proxy_mode`] gives its input in errors.
pub const PROXY_MODE_SOURCE: &str = "kube-proxy /proxyMode";

/// kube-proxy's mode: the one type for what `/proxyMode` prints, what
/// `--kube-proxy.mode` declares and what evaluation decides. Serialized as the
/// lowercase mode string (`"unknown"`, `"iptables"`, `"ipvs"`, `"nftables"`,
/// `"kernelspace"`, or the text of `Other`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ProxyMode {
    /// Not known (the flag's `auto`; nothing reported or inferred).
    #[default]
    Unknown,
    Iptables,
    Ipvs,
    Nftables,
    /// Windows' kernelspace (HNS) mode.
    KernelSpace,
    /// `--kube-proxy.mode none`: this node runs without kube-proxy on purpose (a CNI replaces it,
    /// or it was removed); kube-proxy's state in the data plane is then left over, not a kube-proxy
    /// that should be running. Never what kube-proxy itself reports.
    NoKubeProxy,
    /// Anything else (e.g. the removed `userspace`), as printed.
    Other(String),
}

impl ProxyMode {
    pub fn as_str(&self) -> &str {
        match self {
            ProxyMode::Unknown => "unknown",
            ProxyMode::Iptables => "iptables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Nftables => "nftables",
            ProxyMode::KernelSpace => "kernelspace",
            ProxyMode::NoKubeProxy => "none",
            ProxyMode::Other(s) => s,
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for ProxyMode {
    fn from(s: String) -> Self {
        match s.as_str() {
            "unknown" => ProxyMode::Unknown,
            "iptables" => ProxyMode::Iptables,
            "ipvs" => ProxyMode::Ipvs,
            "nftables" => ProxyMode::Nftables,
            "kernelspace" => ProxyMode::KernelSpace,
            "none" => ProxyMode::NoKubeProxy,
            _ => ProxyMode::Other(s),
        }
    }
}

impl From<ProxyMode> for String {
    fn from(m: ProxyMode) -> Self {
        match m {
            ProxyMode::Other(s) => s,
            other => other.as_str().to_string(),
        }
    }
}

impl ProxyMode {
    /// One of the modes kube-proxy has on Linux: the ones the checks know.
    pub fn is_linux_mode(&self) -> bool {
        matches!(self, ProxyMode::Iptables | ProxyMode::Ipvs | ProxyMode::Nftables)
    }
}

/// `--kube-proxy.mode`: `auto` (or `unknown`), `iptables`, `ipvs`, `nftables`, or `none` (no
/// kube-proxy on this node, on purpose).
impl std::str::FromStr for ProxyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" | "unknown" => Ok(ProxyMode::Unknown),
            "iptables" => Ok(ProxyMode::Iptables),
            "ipvs" => Ok(ProxyMode::Ipvs),
            "nftables" => Ok(ProxyMode::Nftables),
            "none" => Ok(ProxyMode::NoKubeProxy),
            other => Err(format!(
                "unknown proxy mode {other:?}: expected auto, iptables, ipvs, nftables or none"
            )),
        }
    }
}

/// Parses the `/proxyMode` body: one word (surrounding whitespace trimmed) of
/// `[A-Za-z0-9_.-]`, at most 64 characters. Anything else (an HTML error page, `404 page not
/// found`) is an error.
pub fn parse_proxy_mode(body: &str) -> Result<ProxyMode, ParseError> {
    let word = body.trim();
    if word.is_empty() {
        return Err(ParseError::whole(
            PROXY_MODE_SOURCE,
            "empty body, expected a proxy mode",
        ));
    }
    let valid = word.len() <= 64
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid {
        return Err(ParseError::new(
            PROXY_MODE_SOURCE,
            1,
            format!("expected a single proxy mode word, found {}", quote(word)),
        ));
    }
    Ok(ProxyMode::from(word.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODE_IPTABLES: &str = include_str!("../../../tests/fixtures/kube-proxy/iptables.txt");
    const MODE_IPVS: &str = include_str!("../../../tests/fixtures/kube-proxy/ipvs.txt");

    #[test]
    fn proxy_mode() {
        assert_eq!(parse_proxy_mode(MODE_IPTABLES).unwrap(), ProxyMode::Iptables);
        assert_eq!(parse_proxy_mode(MODE_IPVS).unwrap(), ProxyMode::Ipvs);
        assert_eq!(parse_proxy_mode(" nftables\n").unwrap(), ProxyMode::Nftables);
        assert_eq!(parse_proxy_mode("kernelspace").unwrap(), ProxyMode::KernelSpace);
        assert_eq!(
            parse_proxy_mode("userspace").unwrap(),
            ProxyMode::Other("userspace".into())
        );
        assert!(parse_proxy_mode("").is_err());
        assert!(parse_proxy_mode("  \n").is_err());
        assert!(parse_proxy_mode("404 page not found").is_err());
        assert!(parse_proxy_mode("<html>").is_err());
        assert_eq!(
            serde_json::to_string(&ProxyMode::KernelSpace).unwrap(),
            "\"kernelspace\""
        );
        assert_eq!(
            serde_json::to_string(&ProxyMode::Other("x-y".into())).unwrap(),
            "\"x-y\""
        );
        assert_eq!(serde_json::from_str::<ProxyMode>("\"ipvs\"").unwrap(), ProxyMode::Ipvs);
        assert_eq!(
            serde_json::from_str::<ProxyMode>("\"weird\"").unwrap(),
            ProxyMode::Other("weird".into())
        );
        assert_eq!(ProxyMode::Nftables.to_string(), "nftables");
    }
}
