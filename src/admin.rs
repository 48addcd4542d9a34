//! The admin server: `/healthz` (liveness: this process answers HTTP), `/readyz` (ready once
//! the first complete table is published, and not while shutting down) and `/metrics`
//! (Prometheus text format).
//!
//! It reads only the readiness latch, the lifecycle and the metrics; it must not touch routing,
//! and it runs on its own port so probes never compete with proxied traffic for a route.

use std::sync::Arc;

use async_trait::async_trait;
use http::{HeaderValue, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::table::TableReader;

/// The admin application.
pub struct Admin {
    pub table: TableReader,
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
}

impl Admin {
    /// Status and body for a request path.
    pub fn answer(&self, path: &str) -> (StatusCode, String) {
        match path {
            "/healthz" | "/livez" => (StatusCode::OK, "ok\n".into()),
            "/readyz" if self.lifecycle.is_shutting_down() => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: shutting down\n".into(),
            ),
            "/readyz" if self.table.is_published() => (
                StatusCode::OK,
                format!("ready, table generation {}\n", self.table.load().generation),
            ),
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: no routing table yet\n".into(),
            ),
            "/metrics" => (StatusCode::OK, self.metrics.render()),
            _ => (
                StatusCode::NOT_FOUND,
                "not found: try /healthz, /readyz or /metrics\n".into(),
            ),
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path();
        let content_type = if path == "/metrics" {
            "text/plain; version=0.0.4; charset=utf-8"
        } else {
            "text/plain; charset=utf-8"
        };
        let (status, body) = self.answer(path);
        let len = body.len();
        let mut resp = Response::new(body.into_bytes());
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        headers.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table;

    #[test]
    fn ready_only_after_first_publish_and_not_while_shutting_down() {
        let (w, r) = table::handle(Default::default());
        let admin = Admin {
            table: r,
            lifecycle: Lifecycle::new(),
            metrics: Arc::new(Metrics::new()),
        };
        assert_eq!(admin.answer("/healthz").0, StatusCode::OK);
        assert_eq!(admin.answer("/readyz").0, StatusCode::SERVICE_UNAVAILABLE);
        w.publish(Default::default());
        assert_eq!(admin.answer("/readyz").0, StatusCode::OK);
        assert_eq!(admin.answer("/other").0, StatusCode::NOT_FOUND);
        assert!(
            admin
                .answer("/metrics")
                .1
                .contains("switchyard_table_swaps_total")
        );
        admin.lifecycle.begin_shutdown();
        assert_eq!(admin.answer("/readyz").0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            admin.answer("/healthz").0,
            StatusCode::OK,
            "alive while draining"
        );
    }
}
