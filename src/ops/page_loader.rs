//! Loads `--error-page` once at startup: a `file://` or `http(s)://` URL that must answer 200.
//! A failed load is a warning and the built-in page is served instead: a missing page must
//! never stop the load balancer. Never used on the request path.

use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
use pingora::prelude::HttpPeer;

use crate::decide::error_page::ErrorPage;

/// Largest error page we load.
const MAX_PAGE_BYTES: usize = 1 << 20;

/// Why a configured error page could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ErrorPageError {
    #[error("{0:?} is not a file://, http:// or https:// URL")]
    BadUrl(String),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("fetching {url}: {reason}")]
    Fetch { url: String, reason: String },
    #[error("fetching {url}: status {status}, expected 200")]
    Status { url: String, status: u16 },
    #[error("{url}: page larger than {MAX_PAGE_BYTES} bytes")]
    TooLarge { url: String },
}

/// Loads `url` as the body for `status`.
pub async fn load(url: &str, status: u16) -> Result<ErrorPage, ErrorPageError> {
    let (body, content_type) = if let Some(path) = url.strip_prefix("file://") {
        let body = tokio::fs::read(path)
            .await
            .map_err(|source| ErrorPageError::Read {
                path: path.to_string(),
                source,
            })?;
        let ct = if path.ends_with(".html") || path.ends_with(".htm") || path.ends_with(".http") {
            "text/html; charset=utf-8"
        } else {
            "text/plain; charset=utf-8"
        };
        (body, ct.to_string())
    } else if url.starts_with("http://") || url.starts_with("https://") {
        fetch(url).await?
    } else {
        return Err(ErrorPageError::BadUrl(url.to_string()));
    };
    if body.len() > MAX_PAGE_BYTES {
        return Err(ErrorPageError::TooLarge {
            url: url.to_string(),
        });
    }
    Ok(ErrorPage {
        status,
        content_type,
        body: Bytes::from(body),
    })
}

/// `--error-page` if set and loadable, else the built-in page; a failure is logged.
pub async fn load_or_builtin(url: Option<&str>, status: u16) -> ErrorPage {
    match url {
        None => ErrorPage::builtin(status),
        Some(url) => match load(url, status).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "could not load --error-page; serving the built-in page");
                ErrorPage::builtin(status)
            }
        },
    }
}

/// GET `url` once with Pingora's client (startup only: this resolves the host name).
async fn fetch(url: &str) -> Result<(Vec<u8>, String), ErrorPageError> {
    let fail = |reason: String| ErrorPageError::Fetch {
        url: url.to_string(),
        reason,
    };
    let uri: Uri = url
        .parse()
        .map_err(|_| ErrorPageError::BadUrl(url.to_string()))?;
    let tls = uri.scheme_str() == Some("https");
    let host = uri
        .host()
        .ok_or_else(|| ErrorPageError::BadUrl(url.to_string()))?
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| fail(format!("resolving {host}: {e}")))?
        .next()
        .ok_or_else(|| fail(format!("{host} has no address")))?;
    let mut peer = HttpPeer::new(addr, tls, host.clone());
    peer.options.connection_timeout = Some(Duration::from_secs(5));
    peer.options.read_timeout = Some(Duration::from_secs(10));
    let connector = Connector::new(None);
    let (mut session, _) = connector
        .get_http_session(&peer)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req =
        RequestHeader::build("GET", pq.as_bytes(), None).map_err(|e| fail(e.to_string()))?;
    req.insert_header("host", host.as_str())
        .map_err(|e| fail(e.to_string()))?;
    req.insert_header("user-agent", "switchyard")
        .map_err(|e| fail(e.to_string()))?;
    session
        .write_request_header(Box::new(req))
        .await
        .map_err(|e| fail(e.to_string()))?;
    session
        .finish_request_body()
        .await
        .map_err(|e| fail(e.to_string()))?;
    session
        .read_response_header()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let (status, content_type) = match session.response_header() {
        Some(h) => (
            h.status.as_u16(),
            h.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("text/html; charset=utf-8")
                .to_string(),
        ),
        None => return Err(fail("no response header".into())),
    };
    if status != 200 {
        return Err(ErrorPageError::Status {
            url: url.to_string(),
            status,
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = session
        .read_response_body()
        .await
        .map_err(|e| fail(e.to_string()))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_PAGE_BYTES {
            return Err(ErrorPageError::TooLarge {
                url: url.to_string(),
            });
        }
    }
    Ok((body, content_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_url_loads_and_missing_file_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("page.html");
        std::fs::write(&path, "<p>custom</p>").unwrap();
        let url = format!("file://{}", path.display());
        let p = load(&url, 403).await.unwrap();
        assert_eq!(&p.body[..], b"<p>custom</p>");
        assert_eq!(p.status, 403);
        assert!(load("file:///nonexistent/x", 404).await.is_err());
        assert!(load("ftp://x", 404).await.is_err());
        let fallback = load_or_builtin(Some("file:///nonexistent/x"), 404).await;
        assert_eq!(fallback.body, ErrorPage::builtin(404).body);
    }

    #[tokio::test]
    async fn http_url_is_fetched_and_non_200_rejected() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for status in ["200 OK", "500 Internal Server Error"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let body = "<p>remote</p>";
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(resp.as_bytes()).await.unwrap();
            }
        });
        let url = format!("http://{addr}/page");
        let p = load(&url, 404).await.unwrap();
        assert_eq!(&p.body[..], b"<p>remote</p>");
        assert!(matches!(
            load(&url, 404).await,
            Err(ErrorPageError::Status { status: 500, .. })
        ));
    }
}
