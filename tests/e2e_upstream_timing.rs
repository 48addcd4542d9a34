//! The endpoint's response time, `switchyard_upstream_response_duration_seconds`, on both HTTP
//! engines (`--fast-path true` and `false`): from the request header being written to the
//! endpoint to its response header arriving, measured against a backend that holds every
//! request for a known time. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// The value of one series in `/metrics` (0 when absent).
async fn metric(sy: &Switchyard, series: &str) -> f64 {
    let text = sy.admin("/metrics").await.body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_response_time_is_measured_on_both_engines() {
    // Held 30 ms: above the 25 ms bucket.
    let b = Backend::builder("b")
        .delay(Duration::from_millis(30))
        .start()
        .await;
    let mut world: Vec<Value> = vec![svc("web", 80).into()];
    world.extend(slices("web", &[&b]));
    for fast in ["true", "false"] {
        let sy = switchyard(world.clone())
            .args(&["--fast-path", fast])
            .start()
            .await;
        for _ in 0..3 {
            assert_eq!(sy.get("/web/x").await.status, 200);
        }
        let h = "switchyard_upstream_response_duration_seconds";
        // A request is recorded after its response reached the client: wait for the third.
        let count_series = format!("{h}_count{{entry=\"web\"}}");
        eventually(Duration::from_secs(5), || async {
            metric(&sy, &count_series).await >= 3.0
        })
        .await;
        let count = metric(&sy, &count_series).await;
        assert_eq!(count, 3.0, "fast path {fast}");
        let under_25ms = metric(&sy, &format!("{h}_bucket{{entry=\"web\",le=\"0.025\"}}")).await;
        // Within a second, not "within 50 ms": how much later than the hold the answer comes is
        // the machine's load, not what this test is about.
        let under_1s = metric(&sy, &format!("{h}_bucket{{entry=\"web\",le=\"1\"}}")).await;
        let under_100us = metric(&sy, &format!("{h}_bucket{{entry=\"web\",le=\"0.0001\"}}")).await;
        assert_eq!(under_25ms, 0.0, "fast path {fast}: faster than the backend");
        assert_eq!(
            under_1s, 3.0,
            "fast path {fast}: every response is counted in time"
        );
        assert_eq!(
            under_100us, 0.0,
            "fast path {fast}: the sub-millisecond buckets exist"
        );
        let sum = metric(&sy, &format!("{h}_sum{{entry=\"web\"}}")).await;
        assert!(sum >= 0.09, "fast path {fast}: sum {sum}");
        // The whole request took at least as long.
        let total = metric(
            &sy,
            "switchyard_http_request_duration_seconds_sum{entry=\"web\"}",
        )
        .await;
        assert!(total >= sum, "fast path {fast}: {total} < {sum}");
    }
}
