//! SIGTERM right after (and during) a burst: every acknowledged span is a row, exactly once,
//! and no temporary file remains. SIGHUP reloads pricing and policies. Runs the real binary.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::child::{request, signal, start};
use common::{read_table, temporary_files};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SpanExporter as _;

const REQUESTS: usize = 300;
const SENDERS: usize = 6;

fn exporter(addr: std::net::SocketAddr) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://{addr}"))
        .build()
        .expect("exporter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_burst_keeps_every_acknowledged_span() {
    let out = tempfile::tempdir().unwrap();
    let collector = start(out.path(), &[], &[]);
    let addr = collector.grpc_addr;

    let next = Arc::new(AtomicUsize::new(0));
    let acknowledged_so_far = Arc::new(AtomicUsize::new(0));
    let (halfway, halfway_reached) = tokio::sync::oneshot::channel::<()>();
    let halfway = Arc::new(std::sync::Mutex::new(Some(halfway)));
    let mut senders = Vec::new();
    for _ in 0..SENDERS {
        let next = Arc::clone(&next);
        let acknowledged_so_far = Arc::clone(&acknowledged_so_far);
        let halfway = Arc::clone(&halfway);
        senders.push(tokio::spawn(async move {
            let exporter = exporter(addr);
            let mut acknowledged = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= REQUESTS {
                    break;
                }
                match exporter.export(request(n, false)).await {
                    Ok(()) => acknowledged.push(n),
                    // Refused: the collector is going away; nothing more to send.
                    Err(_) => break,
                }
                // SIGTERM once half the burst is acknowledged (not merely sent: exports other
                // senders still have on the way may be refused once it arrives).
                if acknowledged_so_far.fetch_add(1, Ordering::SeqCst) + 1 == REQUESTS / 2 {
                    if let Some(signal) = halfway.lock().unwrap().take() {
                        let _ = signal.send(());
                    }
                }
            }
            acknowledged
        }));
    }
    halfway_reached.await.unwrap();
    signal(&collector.child, "TERM");

    let mut acknowledged = Vec::new();
    for sender in senders {
        acknowledged.extend(sender.await.unwrap());
    }
    let status = collector.exited().await;
    assert!(status.success(), "collector exit status {status}");
    assert!(
        acknowledged.len() >= REQUESTS / 2,
        "the first half was acknowledged before SIGTERM"
    );

    assert!(
        temporary_files(out.path()).is_empty(),
        "no temporary file remains"
    );
    let (_, rows) = read_table(out.path());
    let keys: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r["request_id"].clone(), r["attempt_index"].clone()))
        .collect();
    let unique: HashSet<_> = keys.iter().cloned().collect();
    assert_eq!(unique.len(), keys.len(), "no attempt written twice");
    for n in acknowledged {
        for index in ["0", "1"] {
            assert!(
                unique.contains(&(format!("burst-{n}"), index.to_owned())),
                "acknowledged attempt {index} of burst-{n} is missing"
            );
        }
    }
    // The finished-request summaries (`wal/finished/`) stay on purpose: they are a late
    // retry's context after the restart.
    let segments = common::wal_segments(&out.path().join("wal"));
    assert_eq!(
        segments, 0,
        "a clean shutdown leaves no write-ahead log behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_pricing_and_policies_and_keeps_serving() {
    let out = tempfile::tempdir().unwrap();
    let collector = start(out.path(), &[], &[]);
    signal(&collector.child, "HUP");
    let (collector, reloaded) = collector
        .logs(|line| {
            line.contains("pricing snapshots reloaded")
                && line.contains("envelope policies reloaded")
        })
        .await;
    assert!(reloaded, "the reload is logged");

    exporter(collector.grpc_addr)
        .export(request(1, false))
        .await
        .expect("still serving after SIGHUP");
    let status = collector.terminate().await;
    assert!(status.success());
    assert_eq!(read_table(out.path()).1.len(), 2);
}
