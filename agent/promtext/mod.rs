//! The Prometheus text exposition format, read: a strict parser of format 0.0.4
//! ([`parse_exposition`], [`parse_exposition_filtered`], [`parse_exposition_limited`]) whose cost
//! is bounded by [`Limits`], and classic histograms over what it returns ([`histogram()`],
//! [`quantile`], [`delta`]). Errors quote bounded excerpts ([`clip`], [`short_name`]).
//!
//! Generic: nothing here knows which exporter wrote the text (kube-proxy's facts are in
//! `probe::kube_proxy::metrics`) or does I/O.

mod exposition;
mod histogram;
mod labels;
mod lex;
mod limits;

pub use exposition::{
    parse_exposition, parse_exposition_filtered, parse_exposition_limited, parse_float, Exposition, MetricFamily,
    MetricType, Sample,
};
pub use histogram::{delta, histogram, quantile, Histogram, HistogramError};
pub use limits::{clip, short_name, Limits, MAX_MESSAGE_BYTES};
