//! The bundled example's backends: two tiny HTTP/1.1 servers on 127.0.0.1:9001 and :9002 that
//! answer every request with their name and the request line they received, so a newcomer can
//! watch requests being balanced with one `curl` and no cluster.
//!
//! This is demo code, not part of the load balancer: it must never run unless `--demo` is given.

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The manifest `--demo` serves when no `--manifests` is given (in the source tree).
pub const MANIFEST_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo.yaml");

/// The same manifest, compiled in, for a binary run away from its source tree (the container
/// image, an installed copy).
pub const MANIFEST: &str = include_str!("../examples/demo.yaml");

/// The manifest file `--demo` serves: the source tree's, where it is (edits to it are live),
/// else the compiled-in copy written to a file of this process in the temporary directory.
pub fn manifest_path() -> std::io::Result<std::path::PathBuf> {
    manifest_path_from(std::path::Path::new(MANIFEST_PATH))
}

fn manifest_path_from(tree: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    if tree.is_file() {
        return Ok(tree.to_path_buf());
    }
    let copy = std::env::temp_dir().join(format!("switchyard-demo-{}.yaml", std::process::id()));
    std::fs::write(&copy, MANIFEST)?;
    Ok(copy)
}

/// The demo backends' ports.
pub const PORTS: [u16; 2] = [9001, 9002];

/// Largest request head a demo backend reads.
const MAX_HEAD: usize = 16 * 1024;

/// Runs the demo backends until shutdown.
pub struct DemoBackends;

#[async_trait]
impl BackgroundService for DemoBackends {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tasks = Vec::new();
        for (i, port) in PORTS.into_iter().enumerate() {
            let name = format!("backend-{}", i + 1);
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => {
                    tracing::info!(%name, port, "demo backend listening");
                    tasks.push(tokio::spawn(serve(listener, name)));
                }
                Err(e) => tracing::error!(%name, port, error = %e, "demo backend could not bind"),
            }
        }
        let _ = shutdown.changed().await;
        for t in tasks {
            t.abort();
        }
    }
}

async fn serve(listener: TcpListener, name: String) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(connection(stream, name.clone()));
    }
}

/// Answers requests on one keep-alive connection. Request bodies are not expected (the demo
/// is driven with GET) and a connection that sends one is closed after the response.
async fn connection(mut stream: TcpStream, name: String) {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let head_end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            if buf.len() > MAX_HEAD {
                return;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        buf.drain(..head_end);
        let request_line = head.lines().next().unwrap_or("").trim().to_string();
        let has_body = head.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            (l.starts_with("content-length:") && l.trim_end() != "content-length: 0")
                || l.starts_with("transfer-encoding:")
        });
        let body = format!("{name} served {request_line}\n");
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nx-backend: {name}\r\n{}\r\n{body}",
            body.len(),
            if has_body {
                "connection: close\r\n"
            } else {
                ""
            }
        );
        if stream.write_all(resp.as_bytes()).await.is_err() || has_body {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn away_from_the_source_tree_the_compiled_in_manifest_is_served() {
        let here = manifest_path().unwrap();
        assert_eq!(here, std::path::Path::new(MANIFEST_PATH));
        let away =
            manifest_path_from(std::path::Path::new("/nonexistent/examples/demo.yaml")).unwrap();
        assert_ne!(away, here);
        assert_eq!(std::fs::read_to_string(&away).unwrap(), MANIFEST);
        let _ = std::fs::remove_file(away);
    }
}
