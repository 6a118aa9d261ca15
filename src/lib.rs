//! retry-spend-collector: prices LLM retries and fallbacks against dated retry spend envelopes.

pub mod assemble;
pub mod config;
pub mod contract;
pub mod crash;
pub mod decisions;
pub mod error_chain;
pub mod pipeline;
pub mod policy;
pub mod pricing;
pub mod receivers;
pub mod record;
pub mod replay;
pub mod report;
pub mod rules;
pub mod service;
pub mod sinks;
pub mod wal;
