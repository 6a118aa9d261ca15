//! Where evaluated attempts go.

pub mod parquet;
