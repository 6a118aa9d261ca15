//! A real S3-compatible server for the object storage tests: moto's server (PyPI `moto[s3]`
//! with flask and flask-cors, which `.ci/run` installs), started by each test on a free
//! loopback port, and a client to read back what the collector uploaded.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{read_file, sort_rows, Row};

/// Where the tests look for the server: `$MOTO_SERVER`, else `moto_server` on the `PATH`.
pub const SERVER_ENV: &str = "MOTO_SERVER";
pub const ACCESS_KEY: &str = "test-access-key";
pub const SECRET_KEY: &str = "test-secret-key";
pub const REGION: &str = "us-east-1";

/// A moto server process; killed when dropped.
pub struct S3Server {
    child: Option<Child>,
    pub port: u16,
    /// Requests served unauthenticated before every later one must carry known keys; `None`
    /// accepts any keys.
    auth_after: Option<u32>,
}

impl S3Server {
    /// Starts a server that accepts any credentials.
    pub fn start() -> S3Server {
        S3Server::start_with_auth(None)
    }

    /// Starts a server that, after `unauthenticated` requests, refuses keys it does not know
    /// (moto's `INITIAL_NO_AUTH_ACTION_COUNT`).
    pub fn start_with_auth(unauthenticated: Option<u32>) -> S3Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = S3Server {
            child: None,
            port,
            auth_after: unauthenticated,
        };
        server.restart();
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the server (like a crashed or unreachable store); everything it held is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty, and waits until it serves.
    pub fn restart(&mut self) {
        self.stop();
        let program = std::env::var(SERVER_ENV).unwrap_or_else(|_| "moto_server".to_owned());
        let mut command = Command::new(&program);
        command
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(n) = self.auth_after {
            command.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
        }
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {program:?} ({e}): the object storage tests need moto's S3 server. \
                 Install it with `pip install 'moto[s3]' flask flask-cors` (what .ci/run does), or set \
                 {SERVER_ENV} to the moto_server executable."
            )
        });
        // Werkzeug says where it listens once the socket is bound: the server is ready.
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        loop {
            match lines.next() {
                Some(Ok(line)) => {
                    let ready = line.contains("Running on");
                    seen.push(line);
                    if ready {
                        break;
                    }
                }
                _ => panic!(
                    "{program} exited before serving on port {}: {}",
                    self.port,
                    seen.join("\n")
                ),
            }
        }
        // Keep draining its request log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        self.child = Some(child);
    }

    /// Creates a bucket with an unsigned request (one of the unauthenticated ones, if any).
    /// Plain HTTP over a socket: usable from sync and async tests alike.
    pub fn create_bucket(&self, bucket: &str) {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect to moto");
        write!(
            stream,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("response");
        let status = response.lines().next().unwrap_or_default();
        assert!(status.contains(" 200 "), "create bucket {bucket}: {status}");
    }

    /// The environment that points the collector binary at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }

    /// Client settings for in-process collectors, which cannot change the environment.
    pub fn options(&self) -> BTreeMap<String, String> {
        [
            ("aws_access_key_id", ACCESS_KEY),
            ("aws_secret_access_key", SECRET_KEY),
            ("aws_region", REGION),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// A client for `bucket`, to read back what was uploaded.
    pub fn client(&self, bucket: &str) -> Bucket {
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_region(REGION)
            .build()
            .expect("S3 client");
        Bucket {
            store: Arc::new(store),
            runtime: Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("runtime"),
            ),
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A bucket, readable from sync and async tests alike: each call runs on a runtime of its own,
/// waited for on a thread of its own.
pub struct Bucket {
    pub store: Arc<dyn ObjectStore>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Bucket {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Bucket {
    fn run<F: std::future::Future + Send>(&self, future: F) -> F::Output
    where
        F::Output: Send,
    {
        let handle = self.runtime.as_ref().expect("runtime").handle().clone();
        std::thread::scope(|scope| {
            scope
                .spawn(move || handle.block_on(future))
                .join()
                .expect("store call")
        })
    }

    /// Every key under `prefix`, sorted.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut pending = vec![ObjectPath::from(prefix)];
        while let Some(dir) = pending.pop() {
            let listed = self
                .run(self.store.list_with_delimiter(Some(&dir)))
                .expect("list");
            keys.extend(listed.objects.into_iter().map(|o| o.location.to_string()));
            pending.extend(listed.common_prefixes);
        }
        keys.sort();
        keys
    }

    pub fn get(&self, key: &str) -> Bytes {
        let path = ObjectPath::from(key);
        self.run(async { self.store.get(&path).await?.bytes().await })
            .expect("get object")
    }

    /// The entity tag of an object: `"<md5>-<parts>"` for a multipart upload.
    pub fn e_tag(&self, key: &str) -> Option<String> {
        let path = ObjectPath::from(key);
        self.run(self.store.head(&path)).expect("head object").e_tag
    }

    /// Every row of every object under `<prefix>/attempts/`, as [`super::read_table`] reads a
    /// directory.
    pub fn read_table(&self, prefix: &str) -> (Option<SchemaRef>, Vec<Row>) {
        let mut schema = None;
        let mut rows = Vec::new();
        for key in self.keys(&format!("{prefix}/attempts")) {
            let partition = key
                .rsplit('/')
                .nth(1)
                .filter(|p| p.starts_with("date="))
                .map(str::to_owned);
            read_file(self.get(&key), partition, &mut schema, &mut rows);
        }
        sort_rows(&mut rows);
        (schema, rows)
    }
}
