//! Where evaluated attempts go.

pub mod forward;
pub mod parquet;
