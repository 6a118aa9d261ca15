//! Parquet sink (SPEC §5).
