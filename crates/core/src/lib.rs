//! The engine of retry-spend-collector, without tokio, I/O or a clock: the span contract
//! (SPEC §1–2), pricing snapshots (§3–4), the rules (§4), request assembly and envelope
//! policies (§7). The collector (the root package) receives, logs, shards and writes; it reads
//! files and the clock and hands their contents here.

pub mod assemble;
pub mod contract;
pub mod engine;
pub mod policy;
pub mod pricing;
pub mod processor;
pub mod record;
pub mod rules;
pub mod symbol;
pub mod toml_error;
