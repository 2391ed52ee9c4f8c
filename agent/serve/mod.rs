//! Serving only: the HTTP listener and its routes, which copy the bytes of the
//! latest `crate::expose::Publication` (each form rendered once per verdict, at the
//! first request for it) and never evaluate. `http`: the routes (`/metrics`, `/snapshot`, `/findings`,
//! `/`, `/healthz`, `/readyz`); `server`: the listener; connection caps and
//! reserved slots in `admit`, per-connection timers in `conn`, per-request
//! checks (Host, size, method) in `guard`, the bearer token in `token`.

pub mod admit;
pub mod conn;
pub mod guard;
pub mod http;
pub mod server;
pub mod token;
