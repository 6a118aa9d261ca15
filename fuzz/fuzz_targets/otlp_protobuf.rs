//! Arbitrary bytes as an OTLP/gRPC or OTLP/HTTP protobuf body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = ExportTraceServiceRequest::decode(data) {
        retry_spend_collector_fuzz::check_request(&request);
    }
});
