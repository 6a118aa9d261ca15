//! Where evaluated attempts go.

pub mod metrics;
pub mod parquet;
