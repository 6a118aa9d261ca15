//! The `replay` runner: the binary over OTLP JSON lines (files, text or exports), its output
//! read back.
//!
//! ```ignore
//! let rows = Replay::example().policies(dir).rows();
//! let run = Replay::new().input(path).args(["--max-pending-bytes", "1048576"]).run();
//! assert_eq!(run.code(), Some(1), "{}", run.stderr());
//! ```

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use arrow_schema::SchemaRef;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::child::{binary, command_builder, stderr, stdout, succeeded, PRICING};
use super::collector::EXAMPLE;
use super::{read_table, Row};

/// What [`Replay::with`] does to the command.
type CommandChange = Box<dyn FnOnce(&mut Command)>;

/// A `replay` to run: the shipped pricing, no policies, and a fresh output directory unless
/// told otherwise.
pub struct Replay {
    command: Command,
    pricing: OsString,
    output: Option<OsString>,
    inputs: Vec<OsString>,
    stdin: Option<Vec<u8>>,
    change: Option<CommandChange>,
    /// Holds the default output and the inputs written for the run.
    dir: tempfile::TempDir,
}

impl Default for Replay {
    fn default() -> Self {
        Replay::new()
    }
}

impl Replay {
    pub fn new() -> Replay {
        let dir = tempfile::tempdir().unwrap();
        let mut command = binary();
        // Relative defaults (config/policies) never come from the repository's checkout.
        command.arg("replay").current_dir(dir.path());
        Replay {
            command,
            pricing: PRICING.into(),
            output: None,
            inputs: Vec::new(),
            stdin: None,
            change: None,
            dir,
        }
    }

    /// A replay of examples/retries.jsonl.
    pub fn example() -> Replay {
        Replay::new().input(EXAMPLE)
    }

    pub fn input(mut self, path: impl AsRef<OsStr>) -> Replay {
        self.inputs.push(path.as_ref().to_owned());
        self
    }

    /// `text` written to a file of the run, as an input.
    pub fn jsonl(self, text: &str) -> Replay {
        let path = self
            .dir
            .path()
            .join(format!("input-{}.jsonl", self.inputs.len()));
        std::fs::write(&path, text).unwrap();
        self.input(path)
    }

    /// `exports`, one a line, as an input.
    pub fn exports(self, exports: &[ExportTraceServiceRequest]) -> Replay {
        let text: String = exports
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        self.jsonl(&text)
    }

    /// `bytes` on standard input, read as input `-`.
    pub fn stdin(mut self, bytes: Vec<u8>) -> Replay {
        self.stdin = Some(bytes);
        self.input("-")
    }

    pub fn pricing(mut self, dir: impl AsRef<OsStr>) -> Replay {
        self.pricing = dir.as_ref().to_owned();
        self
    }

    pub fn policies(self, dir: impl AsRef<OsStr>) -> Replay {
        self.args([OsStr::new("--policies"), dir.as_ref()])
    }

    /// A directory or an object store URL instead of a fresh directory.
    pub fn output(mut self, output: impl AsRef<OsStr>) -> Replay {
        self.output = Some(output.as_ref().to_owned());
        self
    }

    /// Changes the command after the runner's settings: standard streams of the test's own.
    pub fn with(mut self, change: impl FnOnce(&mut Command) + 'static) -> Replay {
        self.change = Some(Box::new(change));
        self
    }

    /// Starts it, its standard streams piped (unless [`Replay::with`] says otherwise).
    pub fn spawn(mut self) -> Running {
        let out = match &self.output {
            Some(output) => PathBuf::from(output),
            None => self.dir.path().join("out"),
        };
        self.command
            .arg("--pricing")
            .arg(&self.pricing)
            .arg("--output")
            .arg(&out)
            .args(&self.inputs)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(change) = self.change.take() {
            change(&mut self.command);
        }
        let mut child = self.command.spawn().expect("run retry-spend-collector");
        if let Some(bytes) = self.stdin.take() {
            // Closed when dropped: the end of the input.
            child.stdin.take().unwrap().write_all(&bytes).unwrap();
        }
        Running {
            child,
            out,
            _dir: self.dir,
        }
    }

    /// Runs it to its end, whatever its exit status.
    pub fn run(self) -> Replayed {
        self.spawn().wait()
    }

    /// Runs it, which must succeed, and reads its rows back.
    pub fn rows(self) -> Vec<Row> {
        self.run().ok().rows()
    }
}

command_builder!(Replay);

/// A `replay` under way.
pub struct Running {
    pub child: Child,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Running {
    pub fn wait(self) -> Replayed {
        Replayed {
            output: self.child.wait_with_output().expect("wait for replay"),
            out: self.out,
            _dir: self._dir,
        }
    }
}

/// A finished `replay`: its exit status and printout, and where it wrote.
pub struct Replayed {
    pub output: Output,
    /// The `--output` it was given.
    pub out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Replayed {
    /// Asserts that it exited 0, showing its standard error otherwise.
    pub fn ok(self) -> Replayed {
        succeeded("replay", &self.output);
        self
    }

    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn success(&self) -> bool {
        self.output.status.success()
    }

    pub fn stdout(&self) -> String {
        stdout(&self.output)
    }

    pub fn stderr(&self) -> String {
        stderr(&self.output)
    }

    /// The schema of its first file and every row, sorted by (trace_id, span_id).
    pub fn table(&self) -> (Option<SchemaRef>, Vec<Row>) {
        read_table(&self.out)
    }

    pub fn rows(&self) -> Vec<Row> {
        self.table().1
    }

    pub fn out(&self) -> &Path {
        &self.out
    }
}
