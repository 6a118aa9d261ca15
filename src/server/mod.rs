//! What the OTLP receivers and the decision service both serve with: TLS that reloads
//! ([`tls`]), bearer tokens ([`auth`]), their config, and the protobuf answer of a gRPC method
//! served by hand.

pub mod auth;
mod codec;
pub mod config;
pub mod tls;

pub use codec::ResponseEncoder;
pub use config::{AuthConfig, TlsConfig};
