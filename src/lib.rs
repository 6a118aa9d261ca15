//! retry-spend-collector: prices LLM retries and fallbacks against dated retry spend envelopes.

pub mod record;
pub mod sinks;
