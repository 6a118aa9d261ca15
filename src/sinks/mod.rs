//! Where evaluated attempts go.

pub mod forward;
pub mod metrics;
pub mod parquet;
