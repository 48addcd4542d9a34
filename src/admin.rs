//! The admin server: `/healthz` (liveness: this process answers HTTP) and `/readyz` (ready once
//! the first complete table is published).
//!
//! It reads only the readiness latch of the table handle; it must not touch routing, and it
//! runs on its own port so probes never compete with proxied traffic for a route.

use async_trait::async_trait;
use http::{Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::table::TableReader;

/// The admin application.
pub struct Admin {
    pub table: TableReader,
}

impl Admin {
    /// Status and body for a request path.
    pub fn answer(&self, path: &str) -> (StatusCode, String) {
        match path {
            "/healthz" | "/livez" => (StatusCode::OK, "ok\n".into()),
            "/readyz" if self.table.is_published() => (
                StatusCode::OK,
                format!("ready, table generation {}\n", self.table.load().generation),
            ),
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: no routing table yet\n".into(),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                "not found: try /healthz or /readyz\n".into(),
            ),
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let (status, body) = self.answer(session.req_header().uri.path());
        let mut resp = Response::new(body.into_bytes());
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-cache"),
        );
        let len = resp.body().len();
        resp.headers_mut()
            .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table;

    #[test]
    fn ready_only_after_first_publish() {
        let (w, r) = table::handle(Default::default());
        let admin = Admin { table: r };
        assert_eq!(admin.answer("/healthz").0, StatusCode::OK);
        assert_eq!(admin.answer("/readyz").0, StatusCode::SERVICE_UNAVAILABLE);
        w.publish(Default::default());
        assert_eq!(admin.answer("/readyz").0, StatusCode::OK);
        assert_eq!(admin.answer("/other").0, StatusCode::NOT_FOUND);
    }
}
