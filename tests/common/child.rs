//! The collector binary as a child process, and requests to load it with.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Lines};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::Receiver;

use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::trace::SpanData;

use super::otel::span_data;
use super::spans::{kv_int, kv_text};

pub const PRICING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pricing");
/// 2026-08-25T12:00:00Z.
const T0: u64 = 1_787_659_200_000_000_000;

/// Request `n`: a logical span and two attempts, `burst-<n>` attempts 0 and 1. With
/// `announce_count` the logical span says 2 attempts, so the request is evaluated on arrival;
/// without, it waits for its group wait (or shutdown).
pub fn request(n: usize, announce_count: bool) -> Vec<SpanData> {
    let scope = InstrumentationScope::builder("burst").build();
    request_spans(n, announce_count)
        .iter()
        .map(|s| span_data(s, &scope))
        .collect()
}

/// [`request`] as OTLP protobuf spans.
pub fn request_spans(n: usize, announce_count: bool) -> Vec<Span> {
    let mut trace_id = vec![0xab; 16];
    trace_id[..8].copy_from_slice(&(n as u64).to_be_bytes());
    let logical_id = vec![1, 0, 0, 0, 0, 0, 0, 1];
    let request_id = format!("burst-{n}");
    let mut logical_attributes = vec![
        kv_text("retry_spend.span.role", "logical_request"),
        kv_text("retry_spend.request.id", &request_id),
        kv_text("retry_spend.envelope.max_incremental_usd", "0.015"),
    ];
    if announce_count {
        logical_attributes.push(kv_int("retry_spend.attempt_count", 2));
    }
    let mut spans = vec![Span {
        trace_id: trace_id.clone(),
        span_id: logical_id.clone(),
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 10,
        attributes: logical_attributes,
        ..Default::default()
    }];
    for index in 0..2u8 {
        spans.push(Span {
            trace_id: trace_id.clone(),
            span_id: vec![2, 0, 0, 0, 0, 0, 0, index + 1],
            parent_span_id: logical_id.clone(),
            start_time_unix_nano: T0 + u64::from(index),
            end_time_unix_nano: T0 + 5,
            attributes: vec![
                kv_text("retry_spend.span.role", "attempt"),
                kv_text("retry_spend.request.id", &request_id),
                kv_int("retry_spend.attempt.index", i64::from(index)),
                kv_text("gen_ai.request.model", "glm-5"),
                kv_int("gen_ai.usage.input_tokens", 1000),
                kv_int("gen_ai.request.max_tokens", 100),
            ],
            ..Default::default()
        });
    }
    spans
}

/// The collector binary with none of our environment variables and no proxy, so a developer's
/// shell cannot change what a test sees, logging at `info`.
pub fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-spend-collector"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RETRY_SPEND_") {
            command.env_remove(key);
        }
    }
    // Fetches go to 127.0.0.1 directly, whatever proxy the machine sets.
    for proxy in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(proxy);
    }
    command.env("RUST_LOG", "info");
    command
}

/// Runs the binary with `args` to its end.
pub fn run<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    binary()
        .args(args)
        .output()
        .expect("run retry-spend-collector")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that `what` exited 0, showing its standard error otherwise; its standard output.
pub fn succeeded(what: &str, output: &Output) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}): {}",
        output.status,
        stderr(output)
    );
    stdout(output)
}

/// `serve` of the binary on ephemeral loopback ports, with the shipped pricing unless told
/// otherwise.
pub struct Serve {
    command: Command,
    pricing: OsString,
}

impl Default for Serve {
    fn default() -> Self {
        Serve::new()
    }
}

impl Serve {
    pub fn new() -> Serve {
        let mut command = binary();
        command.args(["serve", "--grpc-addr", "127.0.0.1:0"]);
        command.args([
            "--http-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ]);
        Serve {
            command,
            pricing: PRICING.into(),
        }
    }

    pub fn output(mut self, output: impl AsRef<OsStr>) -> Serve {
        self.command.arg("--output").arg(output);
        self
    }

    pub fn pricing(mut self, dir: impl AsRef<OsStr>) -> Serve {
        self.pricing = dir.as_ref().to_owned();
        self
    }

    /// Starts it and reads its log until it listens (a line with `grpc_addr=`) or exits.
    pub fn spawn(mut self) -> Spawned {
        let mut child = self
            .command
            .arg("--pricing")
            .arg(&self.pricing)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start collector");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut log = Vec::new();
        let mut grpc_addr = None;
        while let Some(Ok(line)) = lines.next() {
            grpc_addr = line
                .split("grpc_addr=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(|addr| addr.parse().expect("socket address"));
            log.push(line);
            if grpc_addr.is_some() {
                break;
            }
        }
        Spawned {
            child,
            grpc_addr,
            log,
            lines,
        }
    }

    /// Starts it and waits until it listens.
    pub fn start(self) -> Collector {
        self.spawn().listening()
    }
}

/// `arg`, `args` and `envs` for a builder that holds its `command`, as [`Command`] has them.
macro_rules! command_builder {
    ($builder:ty) => {
        impl $builder {
            pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
                self.command.arg(arg);
                self
            }

            pub fn args<S: AsRef<std::ffi::OsStr>>(
                mut self,
                args: impl IntoIterator<Item = S>,
            ) -> Self {
                self.command.args(args);
                self
            }

            pub fn envs<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
                mut self,
                envs: impl IntoIterator<Item = (K, V)>,
            ) -> Self {
                self.command.envs(envs);
                self
            }
        }
    };
}
pub(crate) use command_builder;

command_builder!(Serve);

/// A started `serve`: its log until it listened, and the rest still to read.
pub struct Spawned {
    pub child: Child,
    /// `None` when it exited before listening.
    pub grpc_addr: Option<SocketAddr>,
    /// Its log until it listened or exited.
    pub log: Vec<String>,
    lines: Lines<BufReader<ChildStderr>>,
}

impl Spawned {
    /// The collector, which must be listening, its whole log on a channel.
    pub fn listening(self) -> Collector {
        let Some(grpc_addr) = self.grpc_addr else {
            panic!(
                "collector exited before listening:\n{}",
                self.log.join("\n")
            );
        };
        let (log, log_lines) = std::sync::mpsc::channel();
        for line in self.log {
            let _ = log.send(line);
        }
        // Keep draining the log so the child never blocks on a full pipe.
        let lines = self.lines;
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = log.send(line);
            }
        });
        Collector {
            child: self.child,
            grpc_addr,
            log: log_lines,
        }
    }

    /// Drains the rest of the log in the background, which nobody reads.
    pub fn discard_log(self) -> (Child, Option<SocketAddr>, Vec<String>) {
        let lines = self.lines;
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        (self.child, self.grpc_addr, self.log)
    }

    /// Stops it with SIGTERM once listening; asserts a clean exit and returns the whole log.
    pub fn terminate(mut self) -> String {
        if self.grpc_addr.is_some() {
            signal(&self.child, "TERM");
        }
        self.log.extend(self.lines.map_while(Result::ok));
        let log = self.log.join("\n");
        assert!(self.child.wait().unwrap().success(), "{log}");
        log
    }
}

/// A running collector binary and what its log says.
pub struct Collector {
    pub child: Child,
    pub grpc_addr: SocketAddr,
    pub log: Receiver<String>,
}

impl Collector {
    /// Its exit status once it exits, waited for off the async runtime's threads.
    pub async fn exited(mut self) -> ExitStatus {
        tokio::task::spawn_blocking(move || self.child.wait())
            .await
            .unwrap()
            .expect("wait for the collector")
    }

    /// Reads its log until a line is `wanted` (false if the log ended first), off the async
    /// runtime's threads.
    pub async fn logs(self, wanted: impl Fn(&str) -> bool + Send + 'static) -> (Collector, bool) {
        tokio::task::spawn_blocking(move || {
            let seen = self.log.iter().any(|line| wanted(&line));
            (self, seen)
        })
        .await
        .unwrap()
    }

    /// Stops it with SIGTERM: its exit status.
    pub async fn terminate(self) -> ExitStatus {
        signal(&self.child, "TERM");
        self.exited().await
    }

    /// SIGKILL, and waits until it is gone.
    pub async fn kill(self) {
        signal(&self.child, "KILL");
        self.exited().await;
    }
}

/// Starts `retry-spend-collector serve` on ephemeral ports writing to `output`, with `args`
/// and `envs` added, and reads the gRPC address from its start-up log.
pub fn start(output: &Path, args: &[&str], envs: &[(&str, &str)]) -> Collector {
    Serve::new()
        .output(output)
        .args(args)
        .envs(envs.iter().copied())
        .start()
}

/// Sends SIGTERM (or another signal) to the child.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status();
    assert!(status.expect("kill").success());
}
