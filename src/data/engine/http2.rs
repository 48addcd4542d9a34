//! HTTP/2 client connections: the loop that accepts their streams, in place of Pingora's
//! (`pingora::apps::ServerApp::process_new`), so that the fast path can take the streams it
//! serves and hand the others to Pingora's proxy, and so that the work a connection starts is
//! bounded. With the fast path on, the connection is the fast path's own (`wire::h2::conn`,
//! with Pingora's settings: 100 streams, a 64 KiB header list, `h2`'s 64 KiB windows): its
//! streams go to the fast path (`h2`), and those it does not serve are carried to
//! Pingora's proxy over a connection inside the process (`h2_bridge`), which the loop of
//! Pingora's own below serves. Without it, the connection is `h2`'s inside Pingora. Pingora's
//! rules for the connection are kept either way: its request checks (`check_h2_request`, with
//! the same budget of refused streams), the stream and header-list limits, graceful shutdown
//! with GOAWAY, and the idle timeout. This module decides nothing about requests and knows
//! nothing of the table.

use std::sync::Arc;

use pingora::apps::HttpServerApp;
use pingora::http::RequestHeader;
use pingora::protocols::http::ServerSession;
use pingora::protocols::http::v2::server::{
    self, H2Accept, H2RequestCheck, HttpSession, check_h2_request,
};
use pingora::protocols::{Digest, Stream};
use pingora::server::ShutdownWatch;

use crate::data::engine::client_stream::ClientStream;
use crate::data::engine::fast::FastPath;
use crate::data::engine::h2_bridge::Bridge;
use crate::data::wire::h2::active::Active;
use crate::data::wire::h2::batch::Batched;
use crate::data::wire::h2::conn::{self, ServerSettings};

/// The fast path's own connection's settings: Pingora's (`default_h2_options`: 100 streams, a
/// 64 KiB header list) and `h2`'s windows.
const SETTINGS: ServerSettings = ServerSettings {
    max_streams: 100,
    stream_window: 65_535,
    connection_window: 65_535,
    max_header_list: 64 * 1024,
};

/// Streams refused by Pingora's request checks before the connection is closed (Pingora's
/// own loop allows as many; its constant is private).
const MAX_MALFORMED_STREAMS: usize = 32;

/// Streams of one connection being served at once. HTTP/2 limits a client to 100 open streams
/// (Pingora's `SETTINGS_MAX_CONCURRENT_STREAMS`), but a stream the client resets is closed for
/// HTTP/2 at once while its work here goes on: without this bound, opening and resetting
/// streams ("rapid reset", CVE-2023-44487) would start backend requests without limit. Twice
/// the HTTP/2 limit, so that a client keeping within it is never refused.
const MAX_STREAMS_IN_FLIGHT: usize = 200;

/// Serves one HTTP/2 client connection (TLS with ALPN `h2`, or h2c with prior knowledge)
/// until it ends: taken streams through `fast`, the others through `app`.
pub async fn serve<A>(
    fast: Option<&Arc<FastPath>>,
    app: &Arc<A>,
    stream: Stream,
    shutdown: &ShutdownWatch,
) where
    A: HttpServerApp + Send + Sync + 'static,
{
    let digest = digest_of(&stream);
    match fast {
        Some(fast) => serve_own(fast, app, stream, digest, shutdown).await,
        None => serve_pingora(app, stream, digest, shutdown).await,
    }
}

/// What a connection's streams are told of it: its address, TLS, PROXY protocol and timing.
fn digest_of(stream: &Stream) -> Arc<Digest> {
    Arc::new(Digest {
        ssl_digest: stream.get_ssl_digest(),
        timing_digest: stream.get_timing_digest(),
        proxy_digest: stream.get_proxy_digest(),
        socket_digest: stream.get_socket_digest(),
    })
}

/// The fast path's own connection: each stream to `fast`, or over the bridge to `app`.
async fn serve_own<A>(
    fast: &Arc<FastPath>,
    app: &Arc<A>,
    stream: Stream,
    digest: Arc<Digest>,
    shutdown: &ShutdownWatch,
) where
    A: HttpServerApp + Send + Sync + 'static,
{
    let id = stream.id();
    // Its writes batched as a backend connection's are: the responses of the streams that
    // finish in one scheduler pass go out in one send.
    let (incoming, conn) = conn::accept(Batched::new(stream), SETTINGS);
    let run = conn.run();
    let bridge = {
        let app = Arc::clone(app);
        let shutdown = shutdown.clone();
        Arc::new(Bridge::new(Arc::clone(&digest), id, move |io| {
            let app = Arc::clone(&app);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let stream: Stream = Box::new(io);
                let digest = digest_of(&stream);
                serve_pingora(&app, stream, digest, &shutdown).await;
            });
        }))
    };
    let idle_timeout = app.server_options().and_then(|o| o.h2_idle_timeout);
    let active = Arc::new(Active::default());
    let mut watch = shutdown.clone();
    let changed = watch.changed();
    let idle = active.idle_for(idle_timeout.unwrap_or_default());
    tokio::pin!(run, changed, idle);
    // Held from the GOAWAY until the connection ends: a stream's answer may still be queued
    // on it when the stream's own guard is dropped, and the process must not exit under it.
    let mut draining = None;
    loop {
        let next = tokio::select! {
            biased;
            () = &mut run => return,
            _ = &mut changed, if draining.is_none() => {
                incoming.graceful_shutdown();
                draining = Some(fast.enter());
                continue;
            }
            next = incoming.accept() => next,
            () = &mut idle, if idle_timeout.is_some() && draining.is_none() => return,
        };
        let Some((head, stream)) = next else {
            // No more streams: the connection runs until those in flight are done.
            return run.await;
        };
        let (parts, ()) = head.into_parts();
        let header = RequestHeader::from(parts);
        match check_h2_request(&header) {
            H2RequestCheck::Valid => {}
            H2RequestCheck::Reset => {
                incoming.refuse(stream, false);
                continue;
            }
            H2RequestCheck::BadRequest => {
                incoming.refuse(stream, true);
                continue;
            }
        }
        if active.count() >= MAX_STREAMS_IN_FLIGHT {
            // Not processed: a client may retry it (RFC 9113 §8.7).
            stream.send_reset(h2::Reason::REFUSED_STREAM);
            continue;
        }
        let busy = active.start();
        let fast = Arc::clone(fast);
        let digest = Arc::clone(&digest);
        let bridge = Arc::clone(&bridge);
        // Boxed: the task stays small (see `serve_pingora`).
        tokio::spawn(Box::pin(async move {
            let _busy = busy;
            let client = Box::new(ClientStream::new(header, stream));
            if let Some(client) = fast.serve_stream(client, &digest).await {
                bridge.carry(*client).await;
            }
        }));
    }
}

/// `h2`'s connection inside Pingora, every stream through `app`.
async fn serve_pingora<A>(
    app: &Arc<A>,
    stream: Stream,
    digest: Arc<Digest>,
    shutdown: &ShutdownWatch,
) where
    A: HttpServerApp + Send + Sync + 'static,
{
    let Ok(mut conn) = server::handshake(stream, app.h2_options()).await else {
        return;
    };
    let idle_timeout = app.server_options().and_then(|o| o.h2_idle_timeout);
    let active = Arc::new(Active::default());
    let mut watch = shutdown.clone();
    let mut draining = false;
    let mut malformed = 0;
    // Made once for the connection, not once per stream: made at every stream's turn of the
    // loop, each registered a waiter (and the idle wait, with no stream in flight, a timer).
    let changed = watch.changed();
    let idle = active.idle_for(idle_timeout.unwrap_or_default());
    tokio::pin!(changed, idle);
    loop {
        // `from_h2_conn` drives the whole connection (it writes what the streams queued).
        let next = if draining {
            HttpSession::from_h2_conn(&mut conn, digest.clone()).await
        } else {
            tokio::select! {
                biased;
                _ = &mut changed => {
                    conn.graceful_shutdown();
                    draining = true;
                    continue;
                }
                next = HttpSession::from_h2_conn(&mut conn, digest.clone()) => next,
                () = &mut idle, if idle_timeout.is_some() => {
                    return;
                }
            }
        };
        let mut session = match next {
            Err(_) | Ok(None) => return,
            Ok(Some(H2Accept::Rejected)) => {
                malformed += 1;
                if malformed > MAX_MALFORMED_STREAMS {
                    return;
                }
                continue;
            }
            // Boxed once: the stream's exchanges hand it on, and each move of the 536 bytes
            // was a copy.
            Ok(Some(H2Accept::Session(session))) => Box::new(session),
        };
        if active.count() >= MAX_STREAMS_IN_FLIGHT {
            // Not processed: a client may retry it (RFC 9113 §8.7).
            session.shutdown_with_reason(h2::Reason::REFUSED_STREAM);
            continue;
        }
        let busy = active.start();
        let app = app.clone();
        let shutdown = shutdown.clone();
        // The exchange is boxed so that the task stays small, and the task itself too: tokio
        // copies a task's future whole into its cell and again at each change of stage, which
        // for a stream (the 536-byte session and the state around it) cost 1.7k instructions,
        // 1.9 % of a relayed gRPC call when the relay took its streams from here.
        tokio::spawn(Box::pin(async move {
            let _busy = busy;
            Box::pin(app.process_new_http(ServerSession::new_http2(*session), &shutdown)).await;
        }));
    }
}
