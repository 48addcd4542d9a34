//! The admin server: `/healthz` (liveness: this process answers HTTP), `/readyz` (ready once
//! the first complete table is published, and not while shutting down) and `/metrics`
//! (Prometheus text format), and `/explain?host=H&path=P[&client=IP][&cookie=C]` (JSON: where
//! such a request would go and why, from the pure `explain` module).
//!
//! It reads only the readiness latch, the lifecycle, the metrics and (for `/explain`) the
//! current table; it must not change routing state, and it runs on its own port so probes never
//! compete with proxied traffic for a route.

use std::sync::Arc;

use async_trait::async_trait;
use http::{HeaderValue, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::decide::attempt::Policy;
use crate::ops::lifecycle::Lifecycle;
use crate::ops::metrics::Metrics;
use crate::table::TableReader;

/// The admin application.
pub struct Admin {
    pub table: TableReader,
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
    /// `--health-fail-open` and `--traffic-healthz`, so `/explain` decides as the data plane
    /// does.
    pub policy: Policy,
    /// `--expose-explain`: answer `/explain` to clients off loopback too.
    pub expose_explain: bool,
}

/// Whether `/explain` answers a client at `peer` (it shows routes and backend addresses: for
/// loopback, such as `kubectl port-forward`, unless `--expose-explain`).
pub fn explain_allowed(peer: Option<std::net::IpAddr>, expose: bool) -> bool {
    expose || peer.is_some_and(|ip| ip.is_loopback())
}

impl Admin {
    /// `/explain`: status and JSON body for a query string.
    pub fn explain(&self, query: &str) -> (StatusCode, String) {
        match crate::decide::explain::Query::from_query_string(query) {
            Ok(q) => {
                let table = self.table.load();
                let x = crate::decide::explain::explain(
                    &table,
                    &q,
                    std::time::Instant::now(),
                    &self.policy,
                );
                let body = serde_json::to_string_pretty(&x)
                    .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
                (StatusCode::OK, body + "\n")
            }
            Err(why) => (
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "error": why }).to_string() + "\n",
            ),
        }
    }

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
                "not found: try /healthz, /readyz, /metrics or /explain?host=H&path=P\n".into(),
            ),
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let uri = &session.req_header().uri;
        let path = uri.path();
        let content_type = match path {
            "/metrics" => "text/plain; version=0.0.4; charset=utf-8",
            "/explain" => "application/json",
            _ => "text/plain; charset=utf-8",
        };
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let (status, body) = if path == "/explain" && !explain_allowed(peer, self.expose_explain) {
            (
                StatusCode::FORBIDDEN,
                "/explain answers loopback clients only (kubectl port-forward); \
                 --expose-explain opens it\n"
                    .into(),
            )
        } else if path == "/explain" {
            self.explain(uri.query().unwrap_or(""))
        } else {
            self.answer(path)
        };
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
    fn explain_answers_loopback_unless_exposed() {
        let lo4 = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        let lo6 = Some(std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
        let pod = Some(std::net::IpAddr::from([10, 1, 2, 3]));
        assert!(explain_allowed(lo4, false) && explain_allowed(lo6, false));
        assert!(!explain_allowed(pod, false) && !explain_allowed(None, false));
        assert!(explain_allowed(pod, true));
    }

    #[test]
    fn ready_only_after_first_publish_and_not_while_shutting_down() {
        let (w, r) = table::handle(Default::default());
        let admin = Admin {
            table: r,
            lifecycle: Lifecycle::new(),
            metrics: Arc::new(Metrics::new()),
            policy: Policy::new(1, std::time::Duration::ZERO, true),
            expose_explain: false,
        };
        assert_eq!(admin.answer("/healthz").0, StatusCode::OK);
        assert_eq!(
            admin.explain("path=/nowhere").0,
            StatusCode::OK,
            "explain answers even for no route"
        );
        assert_eq!(admin.explain("path=relative").0, StatusCode::BAD_REQUEST);
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
