//! Compiles our own protobuf definitions (`proto/`) with `protox`, a protobuf compiler written in
//! Rust, so building needs no system `protoc`.

use std::io;

const PROTO_ROOT: &str = "proto";
const PROTOS: &[&str] = &["proto/retry_spend/v1/decisions.proto"];

fn main() -> io::Result<()> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, [PROTO_ROOT]).map_err(io::Error::other)?;
    // Only the client is generated: the server is served by hand (src/decisions/grpc.rs) so that
    // it shares the receivers' listener, TLS and bearer tokens, and answers malformed protobuf
    // with INVALID_ARGUMENT.
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(descriptors)
}
