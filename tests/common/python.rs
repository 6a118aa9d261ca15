//! The Python interpreter of the tests that check the collector against outside tools (DuckDB,
//! polars, Spark): `$RETRY_SPEND_TEST_PYTHON`, which `.ci/run` points at its virtual
//! environment, else `python3` on the `PATH`.

use std::process::Command;

pub const PYTHON_ENV: &str = "RETRY_SPEND_TEST_PYTHON";

/// The interpreter's name or path, for commands and messages.
pub fn program() -> String {
    std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_owned())
}

/// A command running that interpreter.
pub fn python() -> Command {
    Command::new(program())
}
