//! Arbitrary bytes as one line of `replay` input or an OTLP/HTTP JSON body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(request) = serde_json::from_str::<ExportTraceServiceRequest>(line) {
        retry_spend_collector_fuzz::check_request(&request);
    }
});
