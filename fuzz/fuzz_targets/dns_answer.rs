//! The service_traffic probe's DNS codec (probe::service_traffic::dns): an answer's header, a query's name.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    proxywatch::probe::service_traffic::dns::fuzz(data);
});
