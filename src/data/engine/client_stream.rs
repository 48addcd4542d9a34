//! The client's side of an HTTP/2 stream of the fast path's own server connection
//! (`wire::h2::conn`), as the relay (`relay`) and the HTTP/1 exchange for HTTP/2 clients
//! (`h2`) use it: the request's header, its body and trailers, the response written
//! back, a reset. It does what Pingora's HTTP/2 session did for them, where a client or the
//! access log can see it: the request's header as Pingora makes it (`RequestHeader`), `Date`
//! on every response (in place of any the response had), interim responses and a second
//! header not sent, a write timeout on the body (Pingora's timer), the counts of body bytes
//! the access log reports. It decides nothing.

use std::time::Duration;

use bytes::Bytes;
use h2::Reason;
use http::HeaderMap;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::date::get_cached_date;

use crate::data::wire::h2::conn::Stream;

/// Why the client's side failed: it reset the stream or went away, or a write timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client's stream failed")]
pub struct ClientGone;

/// One stream's client side (see the module).
pub struct ClientStream {
    header: RequestHeader,
    stream: Stream,
    /// The request's trailers once read (a further try sends them again).
    trailers: Option<HeaderMap>,
    /// The response's header went out; its end too.
    answered: bool,
    ended: bool,
    write_timeout: Option<Duration>,
    body_read: usize,
    body_sent: usize,
}

impl ClientStream {
    pub fn new(header: RequestHeader, stream: Stream) -> ClientStream {
        ClientStream {
            header,
            stream,
            trailers: None,
            answered: false,
            ended: false,
            write_timeout: None,
            body_read: 0,
            body_sent: 0,
        }
    }

    /// The request's header and the stream, for a carrier that passes it on whole
    /// (`h2_bridge`).
    pub fn into_parts(self) -> (RequestHeader, Stream) {
        (self.header, self.stream)
    }

    pub fn req_header(&self) -> &RequestHeader {
        &self.header
    }

    pub fn raw_h1_header(&self) -> Bytes {
        Bytes::new()
    }

    pub fn is_body_done(&self) -> bool {
        self.stream.is_recv_done()
    }

    pub async fn read_body_or_idle(&mut self, done: bool) -> Result<Option<Bytes>, ClientGone> {
        if done || self.stream.is_recv_done() {
            self.stream.reset().await;
            return Err(ClientGone);
        }
        match self.stream.data().await {
            Some(Ok(data)) => {
                // Taken: the client may send as much more, as Pingora's session allows.
                self.stream.release_capacity(data.len());
                self.body_read += data.len();
                Ok(Some(data))
            }
            None => Ok(None),
            Some(Err(_)) => Err(ClientGone),
        }
    }

    pub async fn read_request_trailers(&mut self) -> Result<Option<HeaderMap>, ClientGone> {
        if let Some(kept) = &self.trailers {
            return Ok(Some(kept.clone()));
        }
        let trailers = self.stream.trailers().await.map_err(|_| ClientGone)?;
        self.trailers.clone_from(&trailers);
        Ok(trailers)
    }

    pub fn write_response_header(
        &mut self,
        header: Box<ResponseHeader>,
        end: bool,
    ) -> Result<(), ClientGone> {
        // As Pingora's session: an interim header is not sent, nor a second one.
        if self.answered || header.status.is_informational() {
            return Ok(());
        }
        self.answered = true;
        self.ended = end;
        let date = get_cached_date();
        self.stream
            .send_head(
                header.status,
                &header.headers,
                &[(&b"date"[..], date.as_bytes())],
                end,
            )
            .map_err(|_| ClientGone)
    }

    pub async fn write_body(&mut self, data: Bytes, end: bool) -> Result<(), ClientGone> {
        if self.ended {
            return Ok(());
        }
        let n = data.len();
        let sent = self.stream.send_data(data, end);
        let sent = match self.write_timeout {
            Some(t) => pingora_timeout::timeout(t, sent)
                .await
                .map_err(|_| ClientGone)?,
            None => sent.await,
        };
        sent.map_err(|_| ClientGone)?;
        self.body_sent += n;
        self.ended = end;
        Ok(())
    }

    pub fn write_trailers(&mut self, trailers: HeaderMap) -> Result<(), ClientGone> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        self.stream.send_trailers(&trailers).map_err(|_| ClientGone)
    }

    pub fn finish(&mut self) -> Result<(), ClientGone> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        self.stream.send_end().map_err(|_| ClientGone)
    }

    pub fn shutdown_with_reason(&mut self, reason: Reason) {
        self.stream.send_reset(reason);
    }

    pub fn set_write_timeout(&mut self, timeout: Duration) {
        self.write_timeout = Some(timeout);
    }

    pub fn body_bytes_read(&self) -> usize {
        self.body_read
    }

    pub fn body_bytes_sent(&self) -> usize {
        self.body_sent
    }
}
