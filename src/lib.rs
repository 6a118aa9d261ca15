//! retry-spend-collector: prices LLM retries and fallbacks against dated retry spend envelopes.
//!
//! The engine — span contract, pricing, rules, assembly, policies — is the pure `retry-spend-core`
//! crate (crates/core), re-exported here under the same names; this crate receives, logs, shards,
//! writes and serves.

pub use retry_spend_core::{assemble, contract, engine, policy, pricing, processor, record, rules};

pub mod allocator;
pub mod config;
pub mod config_kernel;
pub mod crash;
pub mod decisions;
pub mod error_chain;
pub mod load;
pub mod pipeline;
pub mod pricing_import;
pub mod receivers;
pub mod replay;
pub mod report;
pub mod server;
pub mod service;
pub mod sinks;
pub mod telemetry;
pub mod wal;
