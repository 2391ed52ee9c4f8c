//! kube-proxy's `/healthz` body (port 10256; [`parse_healthz`] → [`Healthz`]) and how stale its
//! last update is ([`Healthz::staleness_seconds`]). Reading the timestamps themselves is
//! [`crate::timefmt`]'s.

use serde::{Deserialize, Serialize};

use crate::parse::ParseError;
use crate::promtext::{clip, MAX_MESSAGE_BYTES};
use crate::timefmt::{parse_timestamp, parse_timestamp_parts, strip_monotonic};

/// The name [`parse_healthz`] gives its input in errors.
pub const HEALTHZ_SOURCE: &str = "kube-proxy /healthz";

/// kube-proxy's `/healthz` body, e.g.
/// `{"lastUpdated": "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.92","currentTime": "…", "nodeEligible": true}`.
///
/// The timestamps are Go `time.Time.String()` values (RFC 3339 is accepted too), kept as text
/// with Go's monotonic-clock suffix ` m=±…` removed; [`parse_healthz`] has checked they parse.
/// Note that a healthy kube-proxy (HTTP 200) reports `lastUpdated == currentTime`; only an
/// unhealthy one (HTTP 503) reports its real last update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Healthz {
    pub last_updated: String,
    pub current_time: String,
    /// `nodeEligible` (v1.28+): false when the node is being deleted or tainted
    /// `ToBeDeletedByClusterAutoscaler`. `None` on older versions.
    pub node_eligible: Option<bool>,
}

impl Healthz {
    /// See [`healthz_staleness_seconds`].
    pub fn staleness_seconds(&self) -> Result<Option<f64>, ParseError> {
        healthz_staleness_seconds(self)
    }
}

#[derive(Deserialize)]
struct RawHealthz {
    #[serde(rename = "lastUpdated")]
    last_updated: String,
    #[serde(rename = "currentTime")]
    current_time: String,
    #[serde(rename = "nodeEligible", default)]
    node_eligible: Option<bool>,
}

/// Parses kube-proxy's `/healthz` JSON body.
pub fn parse_healthz(body: &str) -> Result<Healthz, ParseError> {
    // serde_json's message quotes an unexpected string whole: bound it.
    let raw: RawHealthz = serde_json::from_str(body).map_err(|e| {
        ParseError::new(
            HEALTHZ_SOURCE,
            e.line(),
            clip(format!("invalid /healthz JSON: {e}"), MAX_MESSAGE_BYTES),
        )
    })?;
    let clean = |field: &str, value: &str| -> Result<String, ParseError> {
        let text = strip_monotonic(value).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 1, format!("{field}: {m}")))?;
        parse_timestamp(text).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 1, format!("{field}: {m}")))?;
        Ok(text.to_string())
    };
    Ok(Healthz {
        last_updated: clean("lastUpdated", &raw.last_updated)?,
        current_time: clean("currentTime", &raw.current_time)?,
        node_eligible: raw.node_eligible,
    })
}

/// `currentTime − lastUpdated` in seconds, computed without losing nanoseconds. `None` when
/// `lastUpdated` is Go's zero time (`0001-01-01 00:00:00 +0000 UTC`: kube-proxy never synced).
pub fn healthz_staleness_seconds(h: &Healthz) -> Result<Option<f64>, ParseError> {
    let parse = |field: &str, text: &str| {
        let text = strip_monotonic(text).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 0, format!("{field}: {m}")))?;
        parse_timestamp_parts(text).map_err(|m| ParseError::new(HEALTHZ_SOURCE, 0, format!("{field}: {m}")))
    };
    let last = parse("lastUpdated", &h.last_updated)?;
    let now = parse("currentTime", &h.current_time)?;
    if last == GO_ZERO_TIME {
        return Ok(None);
    }
    let secs = (now.0 - last.0) as f64;
    let nanos = f64::from(now.1) - f64::from(last.1);
    Ok(Some(secs + nanos / 1e9))
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) as (Unix seconds, nanoseconds).
const GO_ZERO_TIME: (i64, u32) = (-62_135_596_800, 0);

#[cfg(test)]
mod tests {
    use super::*;

    const HEALTHZ_PRE_128: &str =
        include_str!("../../../tests/fixtures/kube-proxy/pre-1.28-no-nodeEligible-cilium-pr11733.json");
    const HEALTHZ_V130: &str =
        include_str!("../../../tests/fixtures/kube-proxy/v1.30-kind-nodeEligible-raesene-2024-06-16.json");
    const HEALTHZ_APISERVER: &str =
        include_str!("../../../tests/fixtures/kube-proxy/kind-via-apiserver-proxy-raesene-2025-01-18.json");

    #[test]
    fn healthz_fixtures() {
        let h = parse_healthz(HEALTHZ_PRE_128).unwrap();
        assert_eq!(h.last_updated, "2020-06-03 23:59:53.688063083 +0000 UTC");
        assert_eq!(h.current_time, "2020-06-03 23:59:53.688063083 +0000 UTC");
        assert_eq!(h.node_eligible, None);
        assert_eq!(h.staleness_seconds().unwrap(), Some(0.0));

        let h = parse_healthz(HEALTHZ_V130).unwrap();
        assert_eq!(h.last_updated, "2024-06-16 13:10:38.185046097 +0000 UTC");
        assert_eq!(h.node_eligible, Some(true));
        assert!((parse_timestamp(&h.current_time).unwrap() - 1_718_543_438.185_046).abs() < 1e-6);

        let h = parse_healthz(HEALTHZ_APISERVER).unwrap();
        assert_eq!(h.current_time, "2025-01-18 07:58:53.413049689 +0000 UTC");
        assert_eq!(h.node_eligible, Some(true));
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<Healthz>(&json).unwrap(), h);
    }

    #[test]
    fn healthz_unhealthy_staleness_and_zero_time() {
        let body = r#"{"lastUpdated": "2024-06-16 13:10:08.5 +0000 UTC m=+10.0","currentTime": "2024-06-16 13:10:38.185046097 +0000 UTC m=+40.1", "nodeEligible": false}"#;
        let h = parse_healthz(body).unwrap();
        assert_eq!(h.node_eligible, Some(false));
        let s = h.staleness_seconds().unwrap().unwrap();
        assert!((s - 29.685_046_097).abs() < 1e-9, "{s}");
        let never = r#"{"lastUpdated": "0001-01-01 00:00:00 +0000 UTC","currentTime": "2024-06-16 13:10:38 +0000 UTC", "nodeEligible": true}"#;
        assert_eq!(parse_healthz(never).unwrap().staleness_seconds().unwrap(), None);
        // RFC 3339 is accepted too.
        let rfc = r#"{"lastUpdated": "2024-06-16T15:10:00+02:00","currentTime": "2024-06-16T13:10:30.25Z"}"#;
        assert_eq!(parse_healthz(rfc).unwrap().staleness_seconds().unwrap(), Some(30.25));
    }

    #[test]
    fn healthz_errors_quote_at_most_a_bounded_excerpt() {
        let body = format!(r#"{{"lastUpdated": 1, "currentTime": "{}"}}"#, "x".repeat(60 << 10));
        assert!(parse_healthz(&body).unwrap_err().to_string().len() < 1024);
        let body = format!(r#"{{"lastUpdated": "{}", "currentTime": "x"}}"#, "x".repeat(60 << 10));
        assert!(parse_healthz(&body).unwrap_err().to_string().len() < 1024);
        let body = format!(
            r#"{{"lastUpdated": "x", "currentTime": "x", "nodeEligible": "{}"}}"#,
            "x".repeat(60 << 10)
        );
        assert!(parse_healthz(&body).unwrap_err().to_string().len() < 1024);
    }

    #[test]
    fn healthz_errors() {
        assert!(parse_healthz("").is_err());
        assert!(parse_healthz("ok").is_err());
        assert!(parse_healthz(r#"{"lastUpdated": "x","currentTime": "2024-06-16 13:10:38 +0000 UTC"}"#).is_err());
        assert!(parse_healthz(r#"{"currentTime": "2024-06-16 13:10:38 +0000 UTC"}"#).is_err());
        assert!(parse_healthz(
            r#"{"lastUpdated": "2024-06-16 13:10:38 +0000 UTC m=+x","currentTime": "2024-06-16 13:10:38 +0000 UTC"}"#
        )
        .is_err());
        let e = parse_healthz("{\n\"lastUpdated\": 5}").unwrap_err();
        assert_eq!((e.source_name.as_str(), e.line), (HEALTHZ_SOURCE, 2));
    }
}
