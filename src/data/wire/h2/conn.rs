//! The fast path's HTTP/2 connection (RFC 9113), written for the relay in place of the `h2`
//! crate's: one task per connection reads and writes the socket; the streams, each served by
//! its own task, share its state behind one lock, which no await holds. It has two roles.
//! As a client (`handshake`), to a backend: requests with bodies and trailers out, responses
//! with bodies and trailers in; it refuses server push. As a server (`accept`), to a client:
//! requests come in (`Incoming::accept`), checked as RFC 9113 §8.3 says, past the streams it
//! allows refused (`REFUSED_STREAM`), and responses go out. Both: resets both ways, flow
//! control both ways, the peer's settings, PING, GOAWAY (a stream past its last stream id is
//! told it was not processed), and no more read while a megabyte of frames it must answer
//! (PING and SETTINGS acknowledgements) waits for a peer that does not read. Header blocks are
//! HPACK-coded by `data::wire::hpack` (its encoder uses the static table only). Frames go out as one
//! write per scheduler pass (`batch::Batched` wraps the socket). It knows nothing of routes,
//! retries or timeouts: the relay decides those.
//! Where `h2` costs a relayed gRPC call's backend leg its stream store, frame queues and
//! HPACK's dynamic table (docs/performance.md), this keeps a map of streams and one output
//! buffer.

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use h2::Reason;
use http::header::{HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Notify;

use crate::data::wire::fields;
use crate::data::wire::hpack::{self, Decoder, Encoder, Field};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

/// The frame size every peer must accept, which this connection keeps to for what it reads.
const MAX_FRAME: usize = 16_384;
/// A client's `SETTINGS_MAX_HEADER_LIST_SIZE` (a server's is `ServerSettings`'): the most a
/// response header or trailer section may hold decoded, counted as HTTP/2 counts it (each
/// field's name and value and 32 bytes), as a few bytes of indices can name large table entries
/// many times over; and the most a header block (HEADERS and its CONTINUATIONs) may hold coded.
const MAX_HEADER_LIST: usize = 256 * 1024;
/// The windows a peer starts with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: i64 = 65_535;
const MAX_WINDOW: i64 = (1 << 31) - 1;
/// Bytes of frames waiting to be written past which no more is read: a peer that sends PINGs
/// or SETTINGS and never reads the acknowledgements must not make them pile up here.
const MAX_BACKLOG: usize = 1 << 20;
/// Bytes of DATA frames queued and not yet handed to the socket past which `send_data` waits:
/// a peer's flow-control window is its own to set (up to 2 GiB a stream), so without this a
/// client that grants a large window and reads slowly would have every response body it asked
/// for held here, read from the backends as fast as they send. (`h2` bounds it too, at 400 KiB a
/// stream.) One batch being written is held beside it. Below `MAX_BACKLOG`, so that a
/// connection whose writes wait still reads.
const MAX_UNSENT: usize = 256 * 1024;
/// Requests refused as malformed (RFC 9113 §8.1.1) on one connection, the last of which ends
/// it, as in Pingora's `from_h2_conn`.
const MAX_MALFORMED: usize = 32;

/// Closed streams remembered per connection, for what a late frame on one means (§5.1):
/// bounded, the oldest forgotten first.
const CLOSED_MEMORY: usize = 256;

/// How a stream that is gone from the map closed, as far as frames still coming on it go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Closed {
    /// The peer ended it (END_STREAM) and it closed both ways: more frames on it break the
    /// protocol (a connection error STREAM_CLOSED, RFC 9113 §5.1 "closed").
    PeerEnded,
    /// The peer reset it: a stream error STREAM_CLOSED.
    PeerReset,
    /// Reset here (or refused, or past our GOAWAY): frames the peer sent before it knew are
    /// ignored.
    LocalReset,
    /// On a server, answered whole while the request was still coming, and reset NO_ERROR
    /// (§8.1): the rest of its body and its trailers may still come and are ignored, but a
    /// HEADERS frame that cannot be trailers (no END_STREAM, a pseudo-field) is still reset
    /// PROTOCOL_ERROR, as it would have been a moment earlier (h2spec 8.1/1 raced on this).
    Answered,
}

/// What a DATA or HEADERS frame means on a stream still in the map that takes no more: one
/// the peer ended, or reset; one reset here; or, on a client, a body before its header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Late {
    AfterEnd { send_closed: bool },
    AfterPeerReset,
    AfterLocalReset,
    BeforeHeader,
}

impl Late {
    fn of(s: &StreamState) -> Late {
        match s.error {
            Some(Error::Reset { remote: true, .. }) => Late::AfterPeerReset,
            Some(_) => Late::AfterLocalReset,
            None if s.recv_closed => Late::AfterEnd {
                send_closed: s.send_closed,
            },
            None => Late::BeforeHeader,
        }
    }
}

/// The stream a priority block (5 bytes: E, dependency, weight) depends on.
fn dependency(priority: &[u8]) -> u32 {
    match priority {
        [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]) & 0x7fff_ffff,
        _ => 0,
    }
}

/// The last `CLOSED_MEMORY` streams closed and forgotten, with how, and the send window each
/// had (a WINDOW_UPDATE may still come and overflow it, §6.9.1). A ring, newest last: every
/// stream enters it once, while it is searched only for a frame on a stream no longer open, so
/// entering is a push (a map cost 2-4 % of a relayed gRPC call in its inserts and removals);
/// a stream closed twice is found by its newest entry.
#[derive(Default)]
struct ClosedStreams {
    ring: VecDeque<(u32, Closed, i64)>,
}

impl ClosedStreams {
    fn insert(&mut self, id: u32, how: Closed) {
        self.insert_with_window(id, how, 0);
    }

    fn insert_with_window(&mut self, id: u32, how: Closed, window: i64) {
        if self.ring.len() >= CLOSED_MEMORY {
            self.ring.pop_front();
        }
        self.ring.push_back((id, how, window));
    }

    fn get(&self, id: u32) -> Option<Closed> {
        self.ring
            .iter()
            .rev()
            .find(|(i, _, _)| *i == id)
            .map(|&(_, how, _)| how)
    }

    /// Adds `n` to a closed stream's send window; whether it went past the largest window.
    fn window_overflows(&mut self, id: u32, n: i64) -> bool {
        self.ring
            .iter_mut()
            .rev()
            .find(|(i, _, _)| *i == id)
            .is_some_and(|(_, _, w)| {
                *w += n;
                *w > MAX_WINDOW
            })
    }
}

/// Why a stream, or its connection, failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The stream was reset: by the backend (`remote`), or here.
    #[error("stream reset ({reason:?}, remote: {remote})")]
    Reset { reason: Reason, remote: bool },
    /// The connection was ended by a GOAWAY: the backend's (`remote`), or one sent here on a
    /// protocol error. `unprocessed`: the stream was past the GOAWAY's last stream id.
    #[error("connection gone away ({reason:?}, remote: {remote})")]
    GoAway {
        reason: Reason,
        remote: bool,
        unprocessed: bool,
    },
    /// The connection broke or was closed.
    #[error("connection I/O: {0:?}")]
    Io(io::ErrorKind),
}

impl Error {
    /// The backend did not process the stream: it refused it (`REFUSED_STREAM`), or the stream
    /// was past the last one of the GOAWAY it sent (RFC 9113 §8.7).
    pub fn unprocessed(&self) -> bool {
        match *self {
            Error::Reset { reason, remote } => remote && reason == Reason::REFUSED_STREAM,
            Error::GoAway {
                remote,
                unprocessed,
                ..
            } => remote && unprocessed,
            Error::Io(_) => false,
        }
    }

    /// The connection takes no new stream after this error.
    pub fn ends_connection(&self) -> bool {
        !matches!(self, Error::Reset { .. })
    }
}

/// Stream ids are distinct and few: one multiplication spreads them, over the high bits too,
/// which the stream map's probe tags are made of (an id hashed to itself left them all zero).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Streams = HashMap<u32, StreamState, BuildHasherDefault<IdHasher>>;

/// What the connection and its streams share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the connection's task: frames to write, or a stream gone.
    wake: Notify,
}

/// Which end of the connection this side is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Client,
    Server,
}

struct State {
    role: Role,
    streams: Streams,
    /// A client's next stream id.
    next_id: u32,
    /// A server's: the highest stream id a client opened, and the streams opened, not yet
    /// accepted, and the task waiting for one.
    last_peer_id: u32,
    accepted: VecDeque<(u32, Request<()>)>,
    accept_waker: Option<Waker>,
    /// A server's `SETTINGS_MAX_CONCURRENT_STREAMS`, and the requests refused as malformed.
    max_recv_streams: usize,
    malformed: usize,
    /// Our `SETTINGS_MAX_HEADER_LIST_SIZE`.
    max_header_list: usize,
    /// Frames to write.
    out: Vec<u8>,
    encoder: Encoder,
    /// Streams counted against the peer's `SETTINGS_MAX_CONCURRENT_STREAMS`.
    open: usize,
    max_send_streams: usize,
    /// Streams waiting for one of those.
    slot_waiters: Vec<Waker>,
    /// Streams waiting for `out` to go below `MAX_UNSENT`.
    unsent_waiters: Vec<Waker>,
    peer_initial_window: i64,
    peer_max_frame: usize,
    /// What the peer lets this side send on the connection.
    send_window: i64,
    /// What this side lets the peer send on the connection, and what the streams have taken
    /// of what came but not yet given back in a WINDOW_UPDATE.
    recv_window: i64,
    recv_released: i64,
    /// Our initial stream window and connection window.
    stream_window: i64,
    connection_window: i64,
    /// The connection takes no new stream (a GOAWAY either way, an error).
    closing: bool,
    /// Streams gone from `streams`, and how they closed.
    closed: ClosedStreams,
    /// The error every stream gets from now on.
    failed: Option<Error>,
}

#[derive(Default)]
struct StreamState {
    send_window: i64,
    /// A server's response header went out.
    answered: bool,
    /// END_STREAM sent (or the stream reset).
    send_closed: bool,
    /// The peer's header came: the response's (which `head` holds until the relay takes it),
    /// or on a server the request's.
    headed: bool,
    head: Option<Response<()>>,
    /// The response's body, as it came.
    data: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    /// END_STREAM received.
    recv_closed: bool,
    recv_window: i64,
    /// Taken by the relay, not yet given back to the peer.
    released: i64,
    /// Received, not yet released by the relay (given back when the stream goes).
    unreleased: i64,
    /// The response's `content-length`, and how much of the body came.
    content_length: Option<u64>,
    received: u64,
    error: Option<Error>,
    /// Counted in `open`.
    counted: bool,
    recv_waker: Option<Waker>,
    send_waker: Option<Waker>,
}

impl StreamState {
    fn closed(&self) -> bool {
        self.error.is_some() || (self.send_closed && self.recv_closed)
    }

    fn wake(&mut self, wakers: &mut Vec<Waker>) {
        wakers.extend(self.recv_waker.take());
        wakers.extend(self.send_waker.take());
    }
}

impl State {
    /// A stream the peer may not yet name (RFC 9113 §5.1): one this client has not opened, or
    /// on a server one no request opened (servers open none: push is off).
    fn idle(&self, id: u32) -> bool {
        match self.role {
            Role::Client => id >= self.next_id,
            Role::Server => id.is_multiple_of(2) || id > self.last_peer_id,
        }
    }

    fn frame_head(&mut self, len: usize, kind: u8, flags: u8, id: u32) {
        let len = len as u32;
        self.out.extend_from_slice(&len.to_be_bytes()[1..]);
        self.out.push(kind);
        self.out.push(flags);
        self.out.extend_from_slice(&id.to_be_bytes());
    }

    fn reset(&mut self, id: u32, reason: Reason) {
        self.frame_head(4, RST_STREAM, 0, id);
        self.out.extend_from_slice(&u32::from(reason).to_be_bytes());
    }

    fn window_update(&mut self, id: u32, n: i64) {
        self.frame_head(4, WINDOW_UPDATE, 0, id);
        self.out.extend_from_slice(&(n as u32).to_be_bytes());
    }

    /// A header block as HEADERS and, past the peer's frame size, CONTINUATIONs.
    fn header_block(&mut self, id: u32, end_stream: bool, block: &[u8]) {
        let (first, mut rest) = block.split_at(block.len().min(self.peer_max_frame));
        let end = if end_stream { END_STREAM } else { 0 };
        let more = if rest.is_empty() { END_HEADERS } else { 0 };
        self.frame_head(first.len(), HEADERS, end | more, id);
        self.out.extend_from_slice(first);
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(rest.len().min(self.peer_max_frame));
            rest = tail;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            self.frame_head(chunk.len(), CONTINUATION, flags, id);
            self.out.extend_from_slice(chunk);
        }
    }

    /// Stops counting a stream against the peer's limit once it is closed.
    fn uncount(&mut self, id: u32, wakers: &mut Vec<Waker>) {
        if let Some(s) = self.streams.get_mut(&id)
            && s.counted
            && s.closed()
        {
            s.counted = false;
            self.open -= 1;
            wakers.append(&mut self.slot_waiters);
        }
    }

    /// A DATA or HEADERS frame on stream `id`, known (not idle) and gone from the map: a
    /// connection error when the peer had ended it, a stream error when it had reset it,
    /// ignored when it was reset here (its frames may have been on their way, §5.1).
    /// `unknown`: what a stream never opened below the last one means for this frame.
    fn on_closed(&mut self, id: u32, unknown: Result<(), Reason>) -> Result<(), Reason> {
        match self.closed.get(id) {
            Some(Closed::PeerEnded) => Err(Reason::STREAM_CLOSED),
            Some(Closed::PeerReset) => {
                self.reset(id, Reason::STREAM_CLOSED);
                Ok(())
            }
            Some(Closed::LocalReset | Closed::Answered) => Ok(()),
            None => unknown,
        }
    }

    /// A frame on a stream still here that takes no more (§5.1): after the peer's END_STREAM a
    /// stream error STREAM_CLOSED (half-closed, remote), or a connection error once closed
    /// both ways; after the peer's RST_STREAM a stream error STREAM_CLOSED; after ours,
    /// ignored; a body before its header, a stream error PROTOCOL_ERROR.
    fn late(&mut self, id: u32, late: Late, wakers: &mut Vec<Waker>) -> Result<(), Reason> {
        match late {
            Late::AfterEnd { send_closed: true } => return Err(Reason::STREAM_CLOSED),
            Late::AfterEnd { send_closed: false } => {
                self.stream_error(id, Reason::STREAM_CLOSED, wakers);
            }
            Late::AfterPeerReset => self.reset(id, Reason::STREAM_CLOSED),
            Late::AfterLocalReset => {}
            Late::BeforeHeader => self.stream_error(id, Reason::PROTOCOL_ERROR, wakers),
        }
        Ok(())
    }

    /// A stream error: the stream reset with `reason` here, its task told.
    fn stream_error(&mut self, id: u32, reason: Reason, wakers: &mut Vec<Waker>) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.error.is_none() {
            // A stream closed both ways is over for the peer too: nothing to reset.
            let open = !(s.send_closed && s.recv_closed);
            s.error = Some(Error::Reset {
                reason,
                remote: false,
            });
            s.wake(wakers);
            if open {
                self.reset(id, reason);
            }
            self.uncount(id, wakers);
        }
    }

    /// A connection error: GOAWAY with `reason`, every stream failed.
    fn connection_error(&mut self, reason: Reason, wakers: &mut Vec<Waker>) -> Error {
        let e = Error::GoAway {
            reason,
            remote: false,
            unprocessed: false,
        };
        if self.failed.is_none() {
            self.goaway(reason);
            self.fail(e, wakers);
        }
        e
    }

    /// A GOAWAY with `reason`: a server's names the last stream a client opened, which it may
    /// still be serving; a client's, no stream (it takes no push).
    fn goaway(&mut self, reason: Reason) {
        let last = match self.role {
            Role::Client => 0,
            Role::Server => self.last_peer_id,
        };
        self.frame_head(8, GOAWAY, 0, 0);
        self.out.extend_from_slice(&last.to_be_bytes());
        self.out.extend_from_slice(&u32::from(reason).to_be_bytes());
    }

    /// Removes a stream no one serves any longer; what the peer sent on it and no one took is
    /// the connection's window still.
    fn forget(&mut self, id: u32, wakers: &mut Vec<Waker>) {
        let Some(s) = self.streams.remove(&id) else {
            return;
        };
        let how = match s.error {
            Some(Error::Reset { remote: true, .. }) => Closed::PeerReset,
            Some(Error::Reset {
                reason: Reason::NO_ERROR,
                remote: false,
            }) if self.role == Role::Server && s.send_closed => Closed::Answered,
            None if s.recv_closed => Closed::PeerEnded,
            _ => Closed::LocalReset,
        };
        self.closed.insert_with_window(id, how, s.send_window);
        if s.counted {
            self.open -= 1;
            wakers.append(&mut self.slot_waiters);
        }
        self.give_back(None, s.unreleased);
    }

    /// A server's new stream `id`, opened by a client's header block (`fields`, `size` as
    /// HTTP/2 counts it): queued for `Incoming::accept`, or refused.
    fn opened(
        &mut self,
        id: u32,
        end: bool,
        fields: Vec<Field>,
        size: usize,
        wakers: &mut Vec<Waker>,
    ) -> Result<(), Reason> {
        self.last_peer_id = id;
        if self.closing {
            // Past our GOAWAY: ignored (RFC 9113 §6.8).
            self.closed.insert(id, Closed::LocalReset);
            return Ok(());
        }
        // Streams reset before they were taken wait in the queue too: it is bounded as well.
        if self.open >= self.max_recv_streams || self.accepted.len() >= self.max_recv_streams {
            // Not processed: the client may send it again (§8.7).
            self.reset(id, Reason::REFUSED_STREAM);
            self.closed.insert(id, Closed::LocalReset);
            return Ok(());
        }
        if size > self.max_header_list {
            self.too_large(id, end);
            self.closed.insert(id, Closed::LocalReset);
            return Ok(());
        }
        let head = request_head(fields);
        let content_length = match &head {
            Ok(head) => content_length(head.headers()),
            Err(()) => Ok(None),
        };
        let (Ok(head), Ok(content_length)) = (head, content_length) else {
            return self.malformed(id);
        };
        // A request ended with its header has no body for a length to count (§8.1.1).
        if end && content_length.is_some_and(|n| n != 0) {
            return self.malformed(id);
        }
        self.open += 1;
        self.streams.insert(
            id,
            StreamState {
                send_window: self.peer_initial_window,
                headed: true,
                recv_closed: end,
                recv_window: self.stream_window,
                content_length,
                counted: true,
                ..StreamState::default()
            },
        );
        self.accepted.push_back((id, head));
        wakers.extend(self.accept_waker.take());
        Ok(())
    }

    /// A request whose header list is past our `SETTINGS_MAX_HEADER_LIST_SIZE`: answered 431
    /// (RFC 9113 §10.5.1, RFC 6585), as `h2`'s server answers it for Pingora, and reset if its
    /// body was still to come, so that none is sent. The client broke no rule: the stream is
    /// not counted with the malformed ones.
    fn too_large(&mut self, id: u32, end: bool) {
        let mut block = Vec::with_capacity(8);
        let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        self.encoder.encode(
            [(&b":status"[..], status.as_str().as_bytes(), false)],
            &mut block,
        );
        self.header_block(id, true, &block);
        if !end {
            // What `h2` sends after its 431 (an implicit reset of the half-closed stream).
            self.reset(id, Reason::PROTOCOL_ERROR);
        }
    }

    /// A request refused as malformed (§8.1.1); the `MAX_MALFORMED`th ends the connection.
    fn malformed(&mut self, id: u32) -> Result<(), Reason> {
        self.reset(id, Reason::PROTOCOL_ERROR);
        self.closed.insert(id, Closed::LocalReset);
        self.malformed += 1;
        if self.malformed >= MAX_MALFORMED {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    fn fail(&mut self, e: Error, wakers: &mut Vec<Waker>) {
        self.closing = true;
        self.failed.get_or_insert(e);
        for s in self.streams.values_mut() {
            s.error.get_or_insert(e);
            s.wake(wakers);
            s.counted = false;
        }
        self.open = 0;
        wakers.append(&mut self.slot_waiters);
        wakers.append(&mut self.unsent_waiters);
        wakers.extend(self.accept_waker.take());
    }

    /// Gives `n` bytes of window back to the peer: the connection's, and `stream`'s if given
    /// and still open; a WINDOW_UPDATE once half a window is owed.
    fn give_back(&mut self, stream: Option<u32>, n: i64) {
        if n <= 0 {
            return;
        }
        self.recv_released += n;
        if self.recv_released >= self.connection_window / 2 {
            let n = std::mem::take(&mut self.recv_released);
            self.recv_window += n;
            self.window_update(0, n);
        }
        let half = self.stream_window / 2;
        let Some((id, s)) = stream.and_then(|id| Some(id).zip(self.streams.get_mut(&id))) else {
            return;
        };
        s.released += n;
        if s.released >= half && !s.recv_closed && s.error.is_none() {
            let n = std::mem::take(&mut s.released);
            s.recv_window += n;
            self.window_update(id, n);
        }
    }
}

/// A new connection's state, its own windows capped as HTTP/2 caps them.
fn state(role: Role, stream_window: u32, connection_window: u32) -> State {
    let stream_window = i64::from(stream_window.min(MAX_WINDOW as u32));
    let connection_window = i64::from(connection_window.min(MAX_WINDOW as u32)).max(DEFAULT_WINDOW);
    State {
        role,
        streams: Streams::default(),
        next_id: 1,
        last_peer_id: 0,
        accepted: VecDeque::new(),
        accept_waker: None,
        max_recv_streams: usize::MAX,
        malformed: 0,
        max_header_list: MAX_HEADER_LIST,
        out: Vec::with_capacity(4096),
        encoder: Encoder::new(),
        open: 0,
        max_send_streams: usize::MAX,
        slot_waiters: Vec::new(),
        unsent_waiters: Vec::new(),
        peer_initial_window: DEFAULT_WINDOW,
        peer_max_frame: MAX_FRAME,
        send_window: DEFAULT_WINDOW,
        recv_window: connection_window,
        recv_released: 0,
        stream_window,
        connection_window,
        closing: false,
        closed: ClosedStreams::default(),
        failed: None,
    }
}

/// Queues our SETTINGS (`settings`: identifier and value pairs) and the connection window
/// past the default, and makes the connection's task.
fn start<T>(mut state: State, settings: &[(u16, u32)], io: T) -> (Arc<Shared>, Connection<T>) {
    state.frame_head(6 * settings.len(), SETTINGS, 0, 0);
    for &(id, value) in settings {
        state.out.extend_from_slice(&id.to_be_bytes());
        state.out.extend_from_slice(&value.to_be_bytes());
    }
    if state.connection_window > DEFAULT_WINDOW {
        state.window_update(0, state.connection_window - DEFAULT_WINDOW);
    }
    let preface_due = if state.role == Role::Server {
        PREFACE.len()
    } else {
        0
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        wake: Notify::new(),
    });
    let conn = Connection {
        io: Some(io),
        shared: Arc::clone(&shared),
        read: BytesMut::with_capacity(32 * 1024),
        spare: Vec::with_capacity(4096),
        decoder: Decoder::new(4096),
        block: None,
        preface_due,
        settings_seen: false,
        backlog: 0,
    };
    (shared, conn)
}

/// Starts a client connection over `io`: the preface and settings are queued (no round trip
/// is awaited, as with `h2`); `Connection::run` then drives it.
pub fn handshake<T>(
    io: T,
    stream_window: u32,
    connection_window: u32,
) -> (SendRequest, Connection<T>)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut state = state(Role::Client, stream_window, connection_window);
    state.out.extend_from_slice(PREFACE);
    let settings = [
        // SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE.
        (2, 0),
        (4, state.stream_window as u32),
        (6, MAX_HEADER_LIST as u32),
    ];
    let (shared, conn) = start(state, &settings, io);
    (SendRequest { shared }, conn)
}

/// What a server connection allows its client.
#[derive(Clone, Copy, Debug)]
pub struct ServerSettings {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`: streams past it are refused.
    pub max_streams: u32,
    /// Our initial stream window and connection window: what a client may send ahead.
    pub stream_window: u32,
    pub connection_window: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`: a larger request header is refused, and a header
    /// block coded larger ends the connection.
    pub max_header_list: u32,
}

/// Starts a server connection over `io` (h2c with prior knowledge, or TLS with ALPN `h2`):
/// its settings are queued and the client's preface is expected first; `Connection::run`
/// then drives it, and `Incoming::accept` hands out its requests.
pub fn accept<T>(io: T, settings: ServerSettings) -> (Incoming, Connection<T>)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut state = state(
        Role::Server,
        settings.stream_window,
        settings.connection_window,
    );
    state.max_recv_streams = settings.max_streams as usize;
    state.max_header_list = settings.max_header_list as usize;
    let settings = [
        // SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE,
        // SETTINGS_MAX_HEADER_LIST_SIZE.
        (3, settings.max_streams),
        (4, state.stream_window as u32),
        (6, settings.max_header_list),
    ];
    let (shared, conn) = start(state, &settings, io);
    (Incoming { shared }, conn)
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// A header block being read: its stream, its HEADERS flags, what came so far.
struct Block {
    id: u32,
    flags: u8,
    bytes: BytesMut,
    /// Its priority names the stream itself as its dependency (RFC 9113 §5.3.1).
    self_dependent: bool,
}

/// The connection's task: reads frames and writes what the streams queued.
pub struct Connection<T> {
    /// Taken, and split in two, when the connection runs.
    io: Option<T>,
    shared: Arc<Shared>,
    read: BytesMut,
    /// The write buffer not in use, swapped with the state's.
    spare: Vec<u8>,
    decoder: Decoder,
    block: Option<Block>,
    /// Bytes of the client's preface still to come (a server's).
    preface_due: usize,
    /// The peer's first frame, its SETTINGS, came.
    settings_seen: bool,
    /// Bytes of frames waiting in the state's buffer when the last were read.
    backlog: usize,
}

impl<T> Connection<T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    /// Runs the connection until it ends: the socket closes or breaks, a connection error, or a
    /// GOAWAY once its streams are done. Every stream left gets the reason.
    pub async fn run(mut self) {
        let Some(io) = self.io.take() else {
            return;
        };
        let (mut reader, mut writer) = tokio::io::split(io);
        let end = self.serve(&mut reader, &mut writer).await;
        self.end(end);
    }

    /// Reads and writes at once: a backend that stops reading while its own writes wait (as
    /// this side would while it wrote) must not stop this side reading.
    async fn serve(&mut self, reader: &mut ReadHalf<T>, writer: &mut WriteHalf<T>) -> Error {
        let mut writing = std::mem::take(&mut self.spare);
        let mut at = 0;
        let mut flushing = false;
        loop {
            if at == writing.len() && !flushing {
                writing.clear();
                at = 0;
                let mut st = lock(&self.shared);
                if !st.out.is_empty() {
                    std::mem::swap(&mut st.out, &mut writing);
                    self.backlog = 0;
                    let waiting = std::mem::take(&mut st.unsent_waiters);
                    drop(st);
                    waiting.into_iter().for_each(Waker::wake);
                } else if let Some(e) = st.failed {
                    return e;
                } else if st.closing && st.streams.is_empty() {
                    return Error::Io(io::ErrorKind::NotConnected);
                }
            }
            if self.read.capacity() - self.read.len() < MAX_FRAME {
                self.read.reserve(2 * MAX_FRAME);
            }
            let pending = at < writing.len();
            let reading = self.backlog < MAX_BACKLOG;
            // Each branch is cancel-safe: a write that loses the race wrote nothing.
            tokio::select! {
                r = reader.read_buf(&mut self.read), if reading => match r {
                    Ok(0) => return Error::Io(io::ErrorKind::UnexpectedEof),
                    Ok(_) => self.frames(),
                    Err(e) => return Error::Io(e.kind()),
                },
                // Bytes written, or `None` once flushed.
                w = async {
                    if pending {
                        writer.write(&writing[at..]).await.map(Some)
                    } else {
                        writer.flush().await.map(|()| None)
                    }
                }, if pending || flushing => match w {
                    Ok(Some(0)) => return Error::Io(io::ErrorKind::WriteZero),
                    Ok(Some(n)) => {
                        at += n;
                        flushing = at == writing.len();
                    }
                    Ok(None) => flushing = false,
                    Err(e) => return Error::Io(e.kind()),
                },
                () = self.shared.wake.notified(), if !pending && !flushing => {}
            }
        }
    }

    /// Handles every whole frame read so far.
    fn frames(&mut self) {
        let mut wakers = Vec::new();
        let shared = Arc::clone(&self.shared);
        let mut st = lock(&shared);
        if self.preface_due > 0 {
            let n = self.preface_due.min(self.read.len());
            let at = PREFACE.len() - self.preface_due;
            if self.read[..n] != PREFACE[at..at + n] {
                // Not HTTP/2: nothing to answer (RFC 9113 §3.4).
                st.fail(Error::Io(io::ErrorKind::InvalidData), &mut wakers);
            }
            self.read.advance(n);
            self.preface_due -= n;
        }
        while self.read.len() >= 9 && st.failed.is_none() {
            let len = u32::from_be_bytes([0, self.read[0], self.read[1], self.read[2]]) as usize;
            if len > MAX_FRAME {
                st.connection_error(Reason::FRAME_SIZE_ERROR, &mut wakers);
                break;
            }
            if self.read.len() < 9 + len {
                break;
            }
            let kind = self.read[3];
            let flags = self.read[4];
            let id = u32::from_be_bytes([self.read[5], self.read[6], self.read[7], self.read[8]])
                & 0x7fff_ffff;
            self.read.advance(9);
            let payload = self.read.split_to(len).freeze();
            if let Err(reason) = self.frame(&mut st, kind, flags, id, payload, &mut wakers) {
                st.connection_error(reason, &mut wakers);
            }
        }
        self.backlog = st.out.len();
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
    }

    fn frame(
        &mut self,
        st: &mut State,
        kind: u8,
        flags: u8,
        id: u32,
        payload: Bytes,
        wakers: &mut Vec<Waker>,
    ) -> Result<(), Reason> {
        if !self.settings_seen {
            // The server's preface is a SETTINGS frame (RFC 9113 §3.4).
            if kind != SETTINGS || flags & ACK != 0 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.settings_seen = true;
        }
        if self.block.is_some() && kind != CONTINUATION {
            return Err(Reason::PROTOCOL_ERROR);
        }
        match kind {
            DATA => self.data(st, flags, id, payload, wakers),
            HEADERS => {
                if id == 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                let mut p = payload;
                unpad(&mut p, flags)?;
                let mut self_dependent = false;
                if flags & PRIORITY_FLAG != 0 {
                    if p.len() < 5 {
                        return Err(Reason::FRAME_SIZE_ERROR);
                    }
                    self_dependent = dependency(&p) == id;
                    p.advance(5);
                }
                let block = Block {
                    id,
                    flags,
                    bytes: BytesMut::from(&p[..]),
                    self_dependent,
                };
                if flags & END_HEADERS != 0 {
                    self.headers(st, block, wakers)
                } else {
                    self.block = Some(block);
                    Ok(())
                }
            }
            CONTINUATION => {
                let Some(mut block) = self.block.take() else {
                    return Err(Reason::PROTOCOL_ERROR);
                };
                if block.id != id {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if block.bytes.len() + payload.len() > st.max_header_list {
                    return Err(Reason::ENHANCE_YOUR_CALM);
                }
                block.bytes.extend_from_slice(&payload);
                if flags & END_HEADERS != 0 {
                    self.headers(st, block, wakers)
                } else {
                    self.block = Some(block);
                    Ok(())
                }
            }
            PRIORITY => {
                if id == 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if payload.len() != 5 {
                    st.stream_error(id, Reason::FRAME_SIZE_ERROR, wakers);
                } else if dependency(&payload) == id {
                    // A stream that depends on itself: a stream error (§5.3.1), or for a
                    // stream not open, where no RST_STREAM may go, the connection's.
                    if !st.streams.contains_key(&id) {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
                }
                Ok(())
            }
            RST_STREAM => {
                if id == 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if payload.len() != 4 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                if st.idle(id) {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                let reason = Reason::from(u32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]));
                if let Some(s) = st.streams.get_mut(&id)
                    && s.error.is_none()
                {
                    s.error = Some(Error::Reset {
                        reason,
                        remote: true,
                    });
                    s.wake(wakers);
                }
                st.uncount(id, wakers);
                Ok(())
            }
            SETTINGS => self.settings(st, flags, id, &payload, wakers),
            PUSH_PROMISE => Err(Reason::PROTOCOL_ERROR),
            PING => {
                if id != 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if payload.len() != 8 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                if flags & ACK == 0 {
                    st.frame_head(8, PING, ACK, 0);
                    st.out.extend_from_slice(&payload);
                }
                Ok(())
            }
            GOAWAY => {
                if id != 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if payload.len() < 8 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                let reason = Reason::from(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
                st.closing = true;
                if st.role == Role::Server {
                    // A client's GOAWAY names no stream of ours (we push none): the requests it
                    // made are still served; it opens no more.
                    wakers.extend(st.accept_waker.take());
                    return Ok(());
                }
                let gone = Error::GoAway {
                    reason,
                    remote: true,
                    unprocessed: true,
                };
                let ids: Vec<u32> = st.streams.keys().copied().filter(|&s| s > last).collect();
                for sid in ids {
                    if let Some(s) = st.streams.get_mut(&sid) {
                        s.error.get_or_insert(gone);
                        s.wake(wakers);
                    }
                    st.uncount(sid, wakers);
                }
                wakers.append(&mut st.slot_waiters);
                Ok(())
            }
            WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                let n = i64::from(
                    u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff,
                );
                if id == 0 {
                    if n == 0 {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    st.send_window += n;
                    if st.send_window > MAX_WINDOW {
                        return Err(Reason::FLOW_CONTROL_ERROR);
                    }
                    for s in st.streams.values_mut() {
                        wakers.extend(s.send_waker.take());
                    }
                    return Ok(());
                }
                if st.idle(id) {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if n == 0 {
                    // A stream error (§6.9) whether or not the stream is still here: one that
                    // was answered and forgotten while the frame was on its way is reset again,
                    // not passed over (h2spec 6.9/2 raced on this).
                    if st.streams.contains_key(&id) {
                        st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
                    } else {
                        st.reset(id, Reason::PROTOCOL_ERROR);
                    }
                    return Ok(());
                }
                let Some(s) = st.streams.get_mut(&id) else {
                    // Answered and forgotten while the frame was on its way: an overflow is
                    // still a stream error (h2spec 6.9.1/3 raced on this too).
                    if st.closed.window_overflows(id, n) {
                        st.reset(id, Reason::FLOW_CONTROL_ERROR);
                    }
                    return Ok(());
                };
                s.send_window += n;
                if s.send_window > MAX_WINDOW {
                    st.stream_error(id, Reason::FLOW_CONTROL_ERROR, wakers);
                    return Ok(());
                }
                wakers.extend(s.send_waker.take());
                Ok(())
            }
            // Unknown frame types are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    fn data(
        &mut self,
        st: &mut State,
        flags: u8,
        id: u32,
        mut payload: Bytes,
        wakers: &mut Vec<Waker>,
    ) -> Result<(), Reason> {
        if id == 0 || st.idle(id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let len = payload.len() as i64;
        if len > st.recv_window {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        st.recv_window -= len;
        unpad(&mut payload, flags)?;
        let body = payload.len() as i64;
        let Some(s) = st.streams.get_mut(&id) else {
            // A stream gone from here: its share of the window is given back at once.
            st.give_back(None, len);
            return st.on_closed(id, Ok(()));
        };
        if s.error.is_some() || s.recv_closed || !s.headed {
            let late = Late::of(s);
            st.give_back(None, len);
            return st.late(id, late, wakers);
        }
        if len > s.recv_window {
            st.give_back(None, len);
            st.stream_error(id, Reason::FLOW_CONTROL_ERROR, wakers);
            return Ok(());
        }
        s.recv_window -= len;
        s.received += body as u64;
        s.unreleased += body;
        if !payload.is_empty() {
            s.data.push_back(payload);
        }
        let end = flags & END_STREAM != 0;
        let too_long = s.content_length.is_some_and(|n| s.received > n);
        let short = end && s.content_length.is_some_and(|n| s.received != n);
        // A body its `content-length` belies is not ended cleanly but reset.
        if end && !too_long && !short {
            s.recv_closed = true;
        }
        wakers.extend(s.recv_waker.take());
        // Padding is given back at once; the body when the relay has taken it.
        if len > body {
            st.give_back(Some(id), len - body);
        }
        if too_long || short {
            st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
        }
        st.uncount(id, wakers);
        Ok(())
    }

    fn headers(
        &mut self,
        st: &mut State,
        block: Block,
        wakers: &mut Vec<Waker>,
    ) -> Result<(), Reason> {
        let Block {
            id,
            flags,
            bytes,
            self_dependent,
        } = block;
        let opens = st.role == Role::Server && id > st.last_peer_id;
        if id.is_multiple_of(2) || (st.role == Role::Client && st.idle(id)) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let mut fields = Vec::with_capacity(16);
        let mut size = 0;
        let limit = st.max_header_list;
        // Decoded whole even for a stream gone from here, or a list too large: the table must
        // follow the peer's.
        self.decoder
            .decode(&bytes.freeze(), |f| {
                size += f.name.len() + f.value.len() + 32;
                if size <= limit {
                    fields.push(f);
                }
            })
            .map_err(|_| Reason::COMPRESSION_ERROR)?;
        let end = flags & END_STREAM != 0;
        if self_dependent {
            // Its own dependency (§5.3.1): a stream error; a stream it would open is opened
            // reset.
            if opens {
                st.last_peer_id = id;
                st.reset(id, Reason::PROTOCOL_ERROR);
                st.closed.insert(id, Closed::LocalReset);
            } else {
                st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
            }
            return Ok(());
        }
        if opens {
            return st.opened(id, end, fields, size, wakers);
        }
        let Some(s) = st.streams.get_mut(&id) else {
            if st.closed.get(id) == Some(Closed::Answered) {
                if !end || trailer_fields(fields).is_err() {
                    st.reset(id, Reason::PROTOCOL_ERROR);
                }
                return Ok(());
            }
            // On a server, a stream below the last one opened that was never opened: a
            // stream identifier out of order (§5.1.1).
            let unknown = match st.role {
                Role::Server => Err(Reason::PROTOCOL_ERROR),
                Role::Client => Ok(()),
            };
            return st.on_closed(id, unknown);
        };
        if s.error.is_some() || s.recv_closed {
            let late = Late::of(s);
            return st.late(id, late, wakers);
        }
        if size > limit {
            st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
            return Ok(());
        }
        if !s.headed {
            match response_head(fields) {
                // An interim response (1xx) is not relayed.
                Ok(head) if head.status().is_informational() => {
                    if end {
                        st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
                    }
                    return Ok(());
                }
                Ok(head) => {
                    s.content_length = content_length(head.headers()).ok().flatten();
                    s.head = Some(head);
                    s.headed = true;
                }
                Err(()) => {
                    st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
                    return Ok(());
                }
            }
        } else {
            // Trailers: they end the stream and hold no pseudo-field.
            match trailer_fields(fields) {
                Ok(trailers) if end => s.trailers = Some(trailers),
                _ => {
                    st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
                    return Ok(());
                }
            }
        }
        if end {
            if s.content_length.is_some_and(|n| n != s.received) {
                st.stream_error(id, Reason::PROTOCOL_ERROR, wakers);
                return Ok(());
            }
            s.recv_closed = true;
        }
        wakers.extend(s.recv_waker.take());
        st.uncount(id, wakers);
        Ok(())
    }

    fn settings(
        &mut self,
        st: &mut State,
        flags: u8,
        id: u32,
        payload: &[u8],
        wakers: &mut Vec<Waker>,
    ) -> Result<(), Reason> {
        if id != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if flags & ACK != 0 {
            return if payload.is_empty() {
                Ok(())
            } else {
                Err(Reason::FRAME_SIZE_ERROR)
            };
        }
        if !payload.len().is_multiple_of(6) {
            return Err(Reason::FRAME_SIZE_ERROR);
        }
        for setting in payload.chunks_exact(6) {
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match u16::from_be_bytes([setting[0], setting[1]]) {
                // SETTINGS_HEADER_TABLE_SIZE
                1 => st.encoder.peer_table_size_changed(),
                // SETTINGS_MAX_CONCURRENT_STREAMS
                3 => {
                    st.max_send_streams = value as usize;
                    wakers.append(&mut st.slot_waiters);
                }
                // SETTINGS_INITIAL_WINDOW_SIZE: applies to every open stream (§6.9.2).
                4 => {
                    let value = i64::from(value);
                    if value > MAX_WINDOW {
                        return Err(Reason::FLOW_CONTROL_ERROR);
                    }
                    let delta = value - st.peer_initial_window;
                    st.peer_initial_window = value;
                    for s in st.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > MAX_WINDOW {
                            return Err(Reason::FLOW_CONTROL_ERROR);
                        }
                        wakers.extend(s.send_waker.take());
                    }
                }
                // SETTINGS_MAX_FRAME_SIZE
                5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    st.peer_max_frame = value as usize;
                }
                // SETTINGS_ENABLE_PUSH: 0 or 1, and a server may not offer push (§6.5.2);
                // a client's turns on nothing here (no push is sent).
                2 if value > 1 || (value == 1 && st.role == Role::Client) => {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                // SETTINGS_ENABLE_PUSH otherwise, SETTINGS_MAX_HEADER_LIST_SIZE (advisory),
                // and unknown settings.
                _ => {}
            }
        }
        st.frame_head(0, SETTINGS, ACK, 0);
        Ok(())
    }
}

impl<T> Connection<T> {
    /// Every stream left gets `e` (the first reason only).
    fn end(&self, e: Error) {
        let mut wakers = Vec::new();
        lock(&self.shared).fail(e, &mut wakers);
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl<T> Drop for Connection<T> {
    /// Dropped without ending (the pool's idle timeout): the streams are told.
    fn drop(&mut self) {
        self.end(Error::Io(io::ErrorKind::NotConnected));
    }
}

/// Strips a padded frame's padding (`PADDED`), or fails the connection on a bad length.
fn unpad(payload: &mut Bytes, flags: u8) -> Result<(), Reason> {
    if flags & PADDED == 0 {
        return Ok(());
    }
    let Some(&pad) = payload.first() else {
        return Err(Reason::FRAME_SIZE_ERROR);
    };
    let pad = usize::from(pad);
    if pad + 1 > payload.len() {
        return Err(Reason::PROTOCOL_ERROR);
    }
    payload.advance(1);
    payload.truncate(payload.len() - pad);
    Ok(())
}

/// Fields that a connection carries and HTTP/2 forbids (RFC 9113 §8.2.2): the one list every
/// codec keeps (`wire::fields`), but for `te`, which HTTP/2 allows as `trailers` and each use
/// here checks itself.
fn connection_specific(name: &[u8]) -> bool {
    name != b"te" && fields::is_connection_field(name)
}

/// A message's `content-length`, if it has one, read as every codec reads it
/// (`wire::fields::parse_length`: digits only, no sign); `Err` if a value is not one length or
/// two values differ.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ()> {
    let mut found = None;
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        let n = fields::parse_length(value.as_bytes()).ok_or(())?;
        if found.is_some_and(|f| f != n) {
            return Err(());
        }
        found = Some(n);
    }
    Ok(found)
}

/// A request header as RFC 9113 §8.3.1 wants it: `:method`, `:scheme` and `:path` (a
/// `CONNECT` names only `:authority`), each once and before the regular fields, no other
/// pseudo-field; built as `h2` builds it (the scheme dropped when there is no authority: `http`
/// cannot hold one without the other).
fn request_head(fields: Vec<Field>) -> Result<Request<()>, ()> {
    let mut method = None;
    let mut scheme = None;
    let mut authority = None;
    let mut path = None;
    let mut fields = fields.into_iter().peekable();
    while let Some(f) = fields.next_if(|f| f.name.first() == Some(&b':')) {
        let slot = match &f.name[..] {
            b":method" => &mut method,
            b":scheme" => &mut scheme,
            b":authority" => &mut authority,
            b":path" => &mut path,
            _ => return Err(()),
        };
        if slot.replace(f.value).is_some() {
            return Err(());
        }
    }
    let method = Method::from_bytes(&method.ok_or(())?).map_err(drop)?;
    let connect = method == Method::CONNECT;
    let mut parts = http::uri::Parts::default();
    if let Some(a) = authority {
        parts.authority = Some(Authority::from_maybe_shared(a).map_err(drop)?);
    }
    match scheme {
        Some(_) if connect => return Err(()),
        Some(s) => {
            let s = Scheme::try_from(&s[..]).map_err(drop)?;
            if parts.authority.is_some() {
                parts.scheme = Some(s);
            }
        }
        None if !connect => return Err(()),
        None => {}
    }
    match path {
        Some(_) if connect => return Err(()),
        Some(p) if p.is_empty() => return Err(()),
        Some(p) => parts.path_and_query = Some(PathAndQuery::from_maybe_shared(p).map_err(drop)?),
        None if !connect => return Err(()),
        None => {}
    }
    let mut headers = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let (name, value) = regular(field)?;
        headers.append(name, value);
    }
    let mut head = Request::new(());
    *head.method_mut() = method;
    *head.uri_mut() = Uri::from_parts(parts).map_err(drop)?;
    *head.version_mut() = Version::HTTP_2;
    *head.headers_mut() = headers;
    Ok(head)
}

/// The fields gRPC backends send on every call that `http` does not know, made once: `http`
/// copies such a name into an allocation of its own each time it parses one.
static MADE: [HeaderName; 4] = [
    HeaderName::from_static("grpc-status"),
    HeaderName::from_static("grpc-message"),
    HeaderName::from_static("grpc-encoding"),
    HeaderName::from_static("grpc-accept-encoding"),
];

/// A regular field as `http` keeps it, or `Err` if HTTP/2 calls it malformed (§8.2).
fn regular(field: Field) -> Result<(HeaderName, HeaderValue), ()> {
    let name = &field.name[..];
    if name.is_empty()
        || name[0] == b':'
        || name.iter().any(u8::is_ascii_uppercase)
        || connection_specific(name)
    {
        return Err(());
    }
    let name = match MADE.iter().find(|made| made.as_str().as_bytes() == name) {
        Some(made) => made.clone(),
        None => HeaderName::from_bytes(name).map_err(drop)?,
    };
    // `te` may only say that trailers are welcome (§8.2.2).
    if name == http::header::TE && &field.value[..] != b"trailers" {
        return Err(());
    }
    let mut value = HeaderValue::from_maybe_shared(field.value).map_err(drop)?;
    if field.sensitive {
        value.set_sensitive(true);
    }
    Ok((name, value))
}

/// A response header: `:status` first and alone of the pseudo-fields, then regular fields.
fn response_head(fields: Vec<Field>) -> Result<Response<()>, ()> {
    let mut fields = fields.into_iter();
    let status = match fields.next() {
        Some(f) if &f.name[..] == b":status" => StatusCode::from_bytes(&f.value).map_err(drop)?,
        _ => return Err(()),
    };
    let mut headers = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let (name, value) = regular(field)?;
        headers.append(name, value);
    }
    let mut head = Response::new(());
    *head.status_mut() = status;
    *head.version_mut() = Version::HTTP_2;
    *head.headers_mut() = headers;
    Ok(head)
}

fn trailer_fields(fields: Vec<Field>) -> Result<HeaderMap, ()> {
    let mut trailers = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let (name, value) = regular(field)?;
        trailers.append(name, value);
    }
    Ok(trailers)
}

/// Streams are opened through it; cheap to clone.
#[derive(Clone)]
pub struct SendRequest {
    shared: Arc<Shared>,
}

impl SendRequest {
    /// The peer's `SETTINGS_MAX_CONCURRENT_STREAMS` (unbounded until it says).
    pub fn current_max_send_streams(&self) -> usize {
        lock(&self.shared).max_send_streams
    }

    /// Opens no more streams: a GOAWAY, and the connection ends once its streams are done.
    pub fn close(&self) {
        let mut st = lock(&self.shared);
        if st.closing || st.failed.is_some() {
            return;
        }
        st.closing = true;
        st.goaway(Reason::NO_ERROR);
        drop(st);
        self.shared.wake.notify_one();
    }

    /// Opens a stream with `request`'s header (its body, if `end` is false, follows through
    /// `Stream::send_data`), waiting while the peer's limit of streams is reached.
    pub async fn send_request(&self, request: &RequestBlock, end: bool) -> Result<Stream, Error> {
        let id = poll_fn(|cx| {
            let mut st = lock(&self.shared);
            if let Some(e) = st.failed {
                return Poll::Ready(Err(e));
            }
            if st.closing || st.next_id > MAX_WINDOW as u32 {
                return Poll::Ready(Err(Error::GoAway {
                    reason: Reason::NO_ERROR,
                    remote: false,
                    unprocessed: true,
                }));
            }
            if st.open >= st.max_send_streams {
                st.slot_waiters.push(cx.waker().clone());
                return Poll::Pending;
            }
            let id = st.next_id;
            st.next_id += 2;
            st.open += 1;
            match st.encoder.size_update() {
                // Once a connection, and after the peer changes its table size.
                Some(update) => {
                    let mut block = Vec::with_capacity(request.0.len() + 1);
                    block.push(update);
                    block.extend_from_slice(&request.0);
                    st.header_block(id, end, &block);
                }
                None => st.header_block(id, end, &request.0),
            }
            let send_window = st.peer_initial_window;
            let recv_window = st.stream_window;
            st.streams.insert(
                id,
                StreamState {
                    send_window,
                    send_closed: end,
                    recv_window,
                    counted: true,
                    ..StreamState::default()
                },
            );
            Poll::Ready(Ok(id))
        })
        .await?;
        self.shared.wake.notify_one();
        Ok(Stream {
            shared: Arc::clone(&self.shared),
            id,
        })
    }
}

/// A server connection's requests come through it.
pub struct Incoming {
    shared: Arc<Shared>,
}

impl Incoming {
    /// The next request, and its stream for the rest of the request and the response; `None`
    /// once the connection has ended, or the client or this side has said GOAWAY and no
    /// request is left to take.
    pub async fn accept(&self) -> Option<(Request<()>, Stream)> {
        poll_fn(|cx| {
            let mut wakers = Vec::new();
            let mut st = lock(&self.shared);
            let mut next = None;
            while let Some((id, head)) = st.accepted.pop_front() {
                if st.streams.get(&id).is_some_and(|s| s.error.is_none()) {
                    next = Some((id, head));
                    break;
                }
                // Reset before it was taken: never served.
                st.forget(id, &mut wakers);
            }
            let ready = match next {
                Some((id, head)) => Poll::Ready(Some((
                    head,
                    Stream {
                        shared: Arc::clone(&self.shared),
                        id,
                    },
                ))),
                None if st.failed.is_some() || st.closing => Poll::Ready(None),
                None => {
                    st.accept_waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            };
            drop(st);
            wakers.into_iter().for_each(Waker::wake);
            ready
        })
        .await
    }

    /// Takes no new request: a GOAWAY naming the last one opened, which are still served; the
    /// connection ends once they are done.
    pub fn graceful_shutdown(&self) {
        let mut st = lock(&self.shared);
        if st.closing || st.failed.is_some() {
            return;
        }
        st.closing = true;
        st.goaway(Reason::NO_ERROR);
        let waker = st.accept_waker.take();
        drop(st);
        waker.into_iter().for_each(Waker::wake);
        self.shared.wake.notify_one();
    }

    /// Refuses a request the caller found malformed after `accept` gave it: answered `400`
    /// (`bad_request`) or reset (`PROTOCOL_ERROR`), and counted with the connection's own
    /// refusals: the `MAX_MALFORMED`th ends the connection.
    pub fn refuse(&self, stream: Stream, bad_request: bool) {
        if bad_request {
            let mut answer = Response::new(());
            *answer.status_mut() = StatusCode::BAD_REQUEST;
            let _ = stream.send_response(&answer, true);
        } else {
            stream.send_reset(Reason::PROTOCOL_ERROR);
        }
        drop(stream);
        let mut wakers = Vec::new();
        let mut st = lock(&self.shared);
        st.malformed += 1;
        if st.malformed >= MAX_MALFORMED {
            st.connection_error(Reason::ENHANCE_YOUR_CALM, &mut wakers);
        }
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
        self.shared.wake.notify_one();
    }
}

/// A request's header block as it goes out (`SendRequest::send_request`): its pseudo-fields
/// first (`new`), then its fields (`field`, `field_written`) less those HTTP/2 forbids,
/// HPACK-coded as they come (`hpack::field`). The table size update the connection may owe
/// the peer is added when the block is sent, so that a caller codes its block apart from the
/// connection (and once for every try).
#[derive(Clone, Debug)]
pub struct RequestBlock(Vec<u8>);

impl RequestBlock {
    /// A block with the request's pseudo-fields.
    pub fn new(method: &[u8], scheme: &[u8], path: &[u8], authority: Option<&[u8]>) -> Self {
        // Coded as `hpack::field` codes them, without its search of the static table: these
        // names are its entries 1 to 7 (RFC 7541 Appendix A), with the values most requests
        // have.
        let mut block = Vec::with_capacity(256);
        match method {
            b"GET" => block.push(0x82),
            b"POST" => block.push(0x83),
            _ => hpack::field_named(2, method, &mut block),
        }
        match scheme {
            b"http" => block.push(0x86),
            b"https" => block.push(0x87),
            _ => hpack::field_named(6, scheme, &mut block),
        }
        match path {
            b"/" => block.push(0x84),
            b"/index.html" => block.push(0x85),
            _ => hpack::field_named(4, path, &mut block),
        }
        if let Some(authority) = authority {
            hpack::field_named(1, authority, &mut block);
        }
        RequestBlock(block)
    }

    /// A `CONNECT` request's block: its pseudo-fields are `:method` and `:authority` alone
    /// (RFC 9113 §8.5).
    pub fn connect(authority: &[u8]) -> Self {
        let mut block = Vec::with_capacity(128);
        hpack::field_named(2, b"CONNECT", &mut block);
        hpack::field_named(1, authority, &mut block);
        RequestBlock(block)
    }

    /// Adds a field (lower-case `name`), unless HTTP/2 forbids it (RFC 9113 §8.2.2).
    pub fn field(&mut self, name: &[u8], value: &[u8], sensitive: bool) {
        if !connection_specific(name) && (name != b"te" || value == b"trailers") {
            hpack::field(name, value, sensitive, &mut self.0);
        }
    }

    /// Adds a field whose value `value` writes in place (`hpack::field_written`), unless
    /// HTTP/2 forbids its name.
    pub fn field_written(&mut self, name: &[u8], value: impl FnOnce(&mut Vec<u8>)) {
        if !connection_specific(name) && name != b"te" {
            hpack::field_written(name, &mut self.0, value);
        }
    }
}

#[cfg(test)]
impl RequestBlock {
    /// The block as coded (without a table size update).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// `http`'s request as a block: its method and target, then its fields.
impl From<&Request<()>> for RequestBlock {
    fn from(request: &Request<()>) -> Self {
        let uri = request.uri();
        let mut block = RequestBlock::new(
            request.method().as_str().as_bytes(),
            uri.scheme_str().unwrap_or("http").as_bytes(),
            uri.path_and_query()
                .map_or("/", |pq| pq.as_str())
                .as_bytes(),
            uri.authority().map(|a| a.as_str().as_bytes()),
        );
        for (name, value) in request.headers() {
            block.field(
                name.as_str().as_bytes(),
                value.as_bytes(),
                value.is_sensitive(),
            );
        }
        block
    }
}

/// One stream: the request's body and trailers go out through it, the response comes in.
/// Dropped before it closed, it resets the stream (`CANCEL`).
pub struct Stream {
    shared: Arc<Shared>,
    id: u32,
}

impl Stream {
    /// The response header (interim ones are passed over); once only.
    pub async fn response(&self) -> Result<Response<()>, Error> {
        self.received(|s| s.head.take().map(Ok).or_else(|| s.error.map(Err)))
            .await
            .unwrap_or_else(Err)
    }

    /// The response ended with its header (no body, no trailers).
    pub fn is_end_stream(&self) -> bool {
        let st = lock(&self.shared);
        st.streams.get(&self.id).is_some_and(|s| {
            s.recv_closed && s.data.is_empty() && s.trailers.is_none() && s.received == 0
        })
    }

    /// The next piece of the response body; `None` at its end. A response received whole
    /// stays whole, whatever befalls the stream or the connection after it.
    pub async fn data(&self) -> Option<Result<Bytes, Error>> {
        self.received(|s| {
            let next = s.data.pop_front().map(|data| Some(Ok(data)));
            next.or_else(|| s.recv_closed.then_some(None))
                .or_else(|| s.error.map(|e| Some(Err(e))))
        })
        .await
        .unwrap_or_else(|e| Some(Err(e)))
    }

    /// The response's trailers, once its body has ended; `None` if it ended without.
    pub async fn trailers(&self) -> Result<Option<HeaderMap>, Error> {
        self.received(|s| {
            let trailers = s.trailers.take().map(|t| Ok(Some(t)));
            trailers
                .or_else(|| s.recv_closed.then_some(Ok(None)))
                .or_else(|| s.error.map(Err))
        })
        .await
        .unwrap_or_else(Err)
    }

    /// What `take` finds of the response in the stream's state, once it finds something (the
    /// task is woken when more comes); `Err` if the stream is gone from the connection.
    async fn received<R>(
        &self,
        mut take: impl FnMut(&mut StreamState) -> Option<R>,
    ) -> Result<R, Error> {
        poll_fn(|cx| {
            let mut st = lock(&self.shared);
            let Some(s) = st.streams.get_mut(&self.id) else {
                return Poll::Ready(Err(Error::Io(io::ErrorKind::NotConnected)));
            };
            match take(s) {
                Some(r) => Poll::Ready(Ok(r)),
                None => {
                    s.recv_waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// `n` bytes of the body were taken: the backend may send as many more.
    pub fn release_capacity(&self, n: usize) {
        let mut st = lock(&self.shared);
        let before = st.out.len();
        if let Some(s) = st.streams.get_mut(&self.id) {
            s.unreleased -= n as i64;
        }
        st.give_back(Some(self.id), n as i64);
        let queued = st.out.len() > before;
        drop(st);
        if queued {
            self.shared.wake.notify_one();
        }
    }

    /// Sends `data`, the end of the body with it if `end`, as the peer's windows allow
    /// (waiting for them).
    pub async fn send_data(&self, data: Bytes, end: bool) -> Result<(), Error> {
        let mut rest = &data[..];
        let mut ended = false;
        poll_fn(|cx| {
            let mut wakers = Vec::new();
            let mut guard = lock(&self.shared);
            let st = &mut *guard;
            let Some(s) = st.streams.get_mut(&self.id) else {
                return Poll::Ready(Err(Error::Io(io::ErrorKind::NotConnected)));
            };
            if let Some(e) = s.error {
                return Poll::Ready(Err(e));
            }
            if s.send_closed {
                return Poll::Ready(Err(Error::Reset {
                    reason: Reason::STREAM_CLOSED,
                    remote: false,
                }));
            }
            if st.out.len() >= MAX_UNSENT {
                // Woken when the connection takes `out` to write it.
                st.unsent_waiters.push(cx.waker().clone());
                return Poll::Pending;
            }
            let room = st.send_window.min(s.send_window).max(0);
            // At most up to the bound, so that DATA alone never stops the reading (MAX_BACKLOG).
            let n = (rest.len() as i64).min(room) as usize;
            let n = n.min(MAX_UNSENT - st.out.len());
            let (now, later) = rest.split_at(n);
            rest = later;
            s.send_window -= n as i64;
            st.send_window -= n as i64;
            let finish = rest.is_empty() && end;
            if finish {
                s.send_closed = true;
            }
            // In frames of at most the peer's size; an empty body's end is a frame of its own.
            let mut chunks = now.chunks(st.peer_max_frame).peekable();
            if now.is_empty() && finish {
                st.frame_head(0, DATA, END_STREAM, self.id);
            }
            while let Some(chunk) = chunks.next() {
                let flags = if finish && chunks.peek().is_none() {
                    END_STREAM
                } else {
                    0
                };
                st.frame_head(chunk.len(), DATA, flags, self.id);
                st.out.extend_from_slice(chunk);
            }
            if finish {
                st.uncount(self.id, &mut wakers);
                ended = true;
            }
            let done = rest.is_empty();
            if !done && let Some(s) = st.streams.get_mut(&self.id) {
                // Waiting for a window, or for the queue to be written.
                s.send_waker = Some(cx.waker().clone());
                if st.out.len() >= MAX_UNSENT {
                    st.unsent_waiters.push(cx.waker().clone());
                }
            }
            let wrote = n > 0 || ended;
            drop(guard);
            wakers.into_iter().for_each(Waker::wake);
            if wrote {
                self.shared.wake.notify_one();
            }
            if done {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// A server's response header, ending the stream if `end`; once only.
    pub fn send_response(&self, head: &Response<()>, end: bool) -> Result<(), Error> {
        self.send_head(head.status(), head.headers(), &[], end)
    }

    /// A server's response header: `status`, `fields` less those HTTP/2 forbids, and `more`
    /// (lower-case names), which replace any of `fields` by the same name; ending the stream if
    /// `end`; once only.
    pub fn send_head(
        &self,
        status: StatusCode,
        fields: &HeaderMap,
        more: &[(&[u8], &[u8])],
        end: bool,
    ) -> Result<(), Error> {
        self.send_with(end, true, |st, id| {
            let mut block = Vec::with_capacity(64);
            let status = (&b":status"[..], status.as_str().as_bytes(), false);
            let fields = fields
                .iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v))
                .filter(|&(n, _)| !connection_specific(n) && !more.iter().any(|&(m, _)| m == n))
                .map(|(n, v)| (n, v.as_bytes(), v.is_sensitive()));
            let more = more.iter().map(|&(n, v)| (n, v, false));
            st.encoder.encode(
                std::iter::once(status).chain(fields).chain(more),
                &mut block,
            );
            st.header_block(id, end, &block);
        })
    }

    /// Ends the message this side sends without trailers: an empty DATA frame, which needs no
    /// window.
    pub fn send_end(&self) -> Result<(), Error> {
        self.send_with(true, false, |st, id| st.frame_head(0, DATA, END_STREAM, id))
    }

    /// Queues what `write` writes for this stream (a header, if `head`: a server's response
    /// header, once), the last this side sends on it if `end`; fails as the stream did (reset,
    /// gone) or if this side's message has ended.
    fn send_with(
        &self,
        end: bool,
        head: bool,
        write: impl FnOnce(&mut State, u32),
    ) -> Result<(), Error> {
        let mut st = lock(&self.shared);
        let Some(s) = st.streams.get_mut(&self.id) else {
            return Err(Error::Io(io::ErrorKind::NotConnected));
        };
        if let Some(e) = s.error {
            return Err(e);
        }
        if s.send_closed || (head && s.answered) {
            return Err(Error::Reset {
                reason: Reason::STREAM_CLOSED,
                remote: false,
            });
        }
        s.answered |= head;
        s.send_closed = end;
        write(&mut st, self.id);
        let mut wakers = Vec::new();
        if end {
            st.uncount(self.id, &mut wakers);
        }
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// The peer's message has been read to its end: its body and trailers (if any) taken.
    pub fn is_recv_done(&self) -> bool {
        let st = lock(&self.shared);
        st.streams
            .get(&self.id)
            .is_none_or(|s| s.recv_closed && s.data.is_empty() && s.trailers.is_none())
    }

    /// Returns once the stream is reset (either way) or its connection gone.
    pub async fn reset(&self) -> Error {
        self.received(|s| s.error).await.unwrap_or_else(|e| e)
    }

    /// Ends the message this side sends (a client's request, a server's response) with
    /// `trailers`.
    pub fn send_trailers(&self, trailers: &HeaderMap) -> Result<(), Error> {
        self.send_with(true, false, |st, id| {
            let mut block = Vec::with_capacity(64);
            let fields = trailers
                .iter()
                .filter(|(n, _)| !connection_specific(n.as_str().as_bytes()))
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes(), v.is_sensitive()));
            st.encoder.encode(fields, &mut block);
            st.header_block(id, true, &block);
        })
    }

    /// Resets the stream with `reason`.
    pub fn send_reset(&self, reason: Reason) {
        let mut wakers = Vec::new();
        let mut st = lock(&self.shared);
        st.stream_error(self.id, reason, &mut wakers);
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
        self.shared.wake.notify_one();
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut wakers = Vec::new();
        let mut st = lock(&self.shared);
        let Some(s) = st.streams.get(&self.id) else {
            return;
        };
        if !s.closed() && st.failed.is_none() {
            // A server that answered whole wants no more of the request (RFC 9113 §8.1).
            let reason = if st.role == Role::Server && s.send_closed {
                Reason::NO_ERROR
            } else {
                Reason::CANCEL
            };
            st.stream_error(self.id, reason, &mut wakers);
        }
        st.forget(self.id, &mut wakers);
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
        self.shared.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn closed_streams_are_remembered_newest_first_and_bounded() {
        let mut closed = ClosedStreams::default();
        closed.insert(1, Closed::PeerEnded);
        closed.insert_with_window(3, Closed::LocalReset, MAX_WINDOW - 10);
        closed.insert(1, Closed::PeerReset);
        assert!(
            matches!(closed.get(1), Some(Closed::PeerReset)),
            "the newest entry"
        );
        assert!(!closed.window_overflows(3, 10));
        assert!(
            closed.window_overflows(3, 1),
            "the window is kept across updates"
        );
        assert!(closed.get(5).is_none());
        for id in (7..).step_by(2).take(CLOSED_MEMORY) {
            closed.insert(id, Closed::PeerEnded);
        }
        assert!(closed.get(3).is_none(), "forgotten past the bound");
        assert_eq!(closed.ring.len(), CLOSED_MEMORY);
        assert!(closed.get(7).is_some());
    }

    /// A request's block without fields, as the tests send it.
    fn request(method: &str, addr: SocketAddr, path: &str) -> RequestBlock {
        RequestBlock::new(
            method.as_bytes(),
            b"http",
            path.as_bytes(),
            Some(addr.to_string().as_bytes()),
        )
    }

    /// The pseudo-fields coded without a search are coded as `hpack::field` codes them.
    #[test]
    fn pseudo_fields_are_coded_as_the_encoder_codes_them() {
        for method in ["GET", "POST", "PUT", "CONNECT"] {
            for scheme in ["http", "https", "ftp"] {
                for path in ["/", "/index.html", "/svc/Method", "*"] {
                    for authority in [None, Some("grpc.test:50051")] {
                        let block = RequestBlock::new(
                            method.as_bytes(),
                            scheme.as_bytes(),
                            path.as_bytes(),
                            authority.map(str::as_bytes),
                        );
                        let mut want = Vec::new();
                        hpack::field(b":method", method.as_bytes(), false, &mut want);
                        hpack::field(b":scheme", scheme.as_bytes(), false, &mut want);
                        hpack::field(b":path", path.as_bytes(), false, &mut want);
                        if let Some(a) = authority {
                            hpack::field(b":authority", a.as_bytes(), false, &mut want);
                        }
                        assert_eq!(block.0, want, "{method} {scheme} {path} {authority:?}");
                    }
                }
            }
        }
    }

    /// An `h2` server on 127.0.0.1 allowing `max` streams, each served by `serve`.
    async fn h2_server<F, Fut>(max: u32, serve: F) -> SocketAddr
    where
        F: Fn(http::Request<h2::RecvStream>, h2::server::SendResponse<Bytes>) -> Fut
            + Send
            + Sync
            + Clone
            + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let serve = serve.clone();
                tokio::spawn(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max)
                        .handshake::<_, Bytes>(tcp)
                        .await
                        .unwrap();
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        tokio::spawn(serve.clone()(req, respond));
                    }
                });
            }
        });
        addr
    }

    async fn client(addr: SocketAddr) -> SendRequest {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = handshake(tcp, 1 << 20, 8 << 20);
        tokio::spawn(conn.run());
        send
    }

    /// Echoes the request body back with trailers naming how much came and the request's own
    /// trailer.
    async fn echo(
        req: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
    ) {
        let (parts, mut body) = req.into_parts();
        let mut got = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            got.extend_from_slice(&chunk);
        }
        let asked = body
            .trailers()
            .await
            .unwrap()
            .and_then(|t| t.get("x-asked").cloned());
        let response = http::Response::builder()
            .status(200)
            .header("x-method", parts.method.as_str())
            .body(())
            .unwrap();
        let mut send = respond.send_response(response, false).unwrap();
        let len = got.len();
        let mut rest = Bytes::from(got);
        while !rest.is_empty() {
            send.reserve_capacity(rest.len());
            let n = std::future::poll_fn(|cx| send.poll_capacity(cx))
                .await
                .unwrap()
                .unwrap();
            send.send_data(rest.split_to(n.min(rest.len())), false)
                .unwrap();
        }
        let mut trailers = HeaderMap::new();
        trailers.insert("x-len", len.into());
        if let Some(asked) = asked {
            trailers.insert("x-asked", asked);
        }
        send.send_trailers(trailers).unwrap();
    }

    async fn body_of(stream: &Stream) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(chunk) = stream.data().await {
            let chunk = chunk.unwrap();
            stream.release_capacity(chunk.len());
            out.extend_from_slice(&chunk);
        }
        out
    }

    #[tokio::test]
    async fn bodies_larger_than_every_window_go_both_ways_with_trailers() {
        let addr = h2_server(100, echo).await;
        let send = client(addr).await;
        // Past the backend's 64 KiB windows one way, and past this side's 1 MiB stream
        // window the other.
        for len in [0, 1, 70_000, 3 << 20] {
            let req = request("POST", addr, "/echo");
            let stream = send.send_request(&req, false).await.unwrap();
            let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let sending = async {
                stream
                    .send_data(Bytes::from(body.clone()), false)
                    .await
                    .unwrap();
                let mut trailers = HeaderMap::new();
                trailers.insert("x-asked", "yes".parse().unwrap());
                stream.send_trailers(&trailers).unwrap();
            };
            let receiving = async {
                let head = stream.response().await.unwrap();
                assert_eq!(head.status(), 200);
                assert_eq!(head.headers()["x-method"], "POST");
                let got = body_of(&stream).await;
                let trailers = stream.trailers().await.unwrap().unwrap();
                (got, trailers)
            };
            let ((), (got, trailers)) = tokio::join!(sending, receiving);
            assert!(got == body, "{len}");
            assert_eq!(trailers["x-len"], len.to_string().as_str());
            assert_eq!(trailers["x-asked"], "yes");
        }
    }

    #[tokio::test]
    async fn streams_past_the_backends_limit_wait_for_one_to_close() {
        let addr = h2_server(1, echo).await;
        let send = client(addr).await;
        let req = request("POST", addr, "/");
        let first = send.send_request(&req, false).await.unwrap();
        // The backend's SETTINGS have come once the first stream's response can: wait for it.
        for _ in 0..100 {
            if send.current_max_send_streams() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(send.current_max_send_streams(), 1);
        let second =
            tokio::time::timeout(Duration::from_millis(100), send.send_request(&req, true));
        assert!(second.await.is_err(), "the second waits");
        first
            .send_data(Bytes::from_static(b"x"), true)
            .await
            .unwrap();
        first.response().await.unwrap();
        assert_eq!(body_of(&first).await, b"x");
        first.trailers().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(5), send.send_request(&req, true));
        let second = second.await.unwrap().unwrap();
        assert_eq!(second.response().await.unwrap().status(), 200);
    }

    /// A backend written frame by frame: a response split over CONTINUATION, a padded DATA
    /// frame, a PING between, trailers; then a second stream's malformed response header.
    #[tokio::test]
    async fn frames_of_every_shape_are_read_and_a_ping_is_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut preface = [0u8; 24];
            s.read_exact(&mut preface).await.unwrap();
            assert_eq!(&preface[..], PREFACE);
            let frame = |kind: u8, flags: u8, id: u32, payload: &[u8]| {
                let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
                out.extend_from_slice(&[kind, flags]);
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(payload);
                out
            };
            let mut wire = frame(SETTINGS, 0, 0, &[]);
            // :status 200 (0x88), then "x-a: 1" literal, split after the status.
            wire.extend(frame(HEADERS, 0, 1, &[0x88]));
            wire.extend(frame(CONTINUATION, END_HEADERS, 1, b"\x00\x03x-a\x011"));
            wire.extend(frame(PING, 0, 0, b"12345678"));
            wire.extend(frame(DATA, PADDED, 1, b"\x03hello\0\0\0"));
            // Trailers: "grpc-status: 0".
            wire.extend(frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                1,
                b"\x00\x0bgrpc-status\x010",
            ));
            // Stream 3: an upper-case field name is malformed.
            wire.extend(frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                3,
                b"\x88\x00\x03X-B\x011",
            ));
            s.write_all(&wire).await.unwrap();
            // Read until the PING's answer and stream 3's reset have come.
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let ping_ack = frame(PING, ACK, 0, b"12345678");
            let reset = frame(
                RST_STREAM,
                0,
                3,
                &u32::from(Reason::PROTOCOL_ERROR).to_be_bytes(),
            );
            let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
            while !(has(&got, &ping_ack) && has(&got, &reset)) {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed before the PING's answer");
                got.extend_from_slice(&buf[..n]);
            }
            s
        });
        let send = client(addr).await;
        let req = request("GET", addr, "/");
        let first = send.send_request(&req, true).await.unwrap();
        let second = send.send_request(&req, true).await.unwrap();
        let head = first.response().await.unwrap();
        assert_eq!(head.headers()["x-a"], "1");
        assert_eq!(body_of(&first).await, b"hello");
        assert_eq!(first.trailers().await.unwrap().unwrap()["grpc-status"], "0");
        assert_eq!(
            second.response().await.unwrap_err(),
            Error::Reset {
                reason: Reason::PROTOCOL_ERROR,
                remote: false
            }
        );
        let _backend = tokio::time::timeout(Duration::from_secs(5), backend)
            .await
            .unwrap()
            .unwrap();
    }

    /// A backend that reads the preface, sends `wire` (after its SETTINGS) and holds the
    /// connection open for `held`.
    async fn raw_backend(wire: Vec<u8>, held: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 24];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0])
                .await
                .unwrap();
            s.write_all(&wire).await.unwrap();
            tokio::time::sleep(held).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_goaway_fails_the_streams_past_its_last_as_unprocessed() {
        // GOAWAY(last stream 1, NO_ERROR), then stream 1's answer.
        let mut wire = vec![0, 0, 8, GOAWAY, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        wire.extend_from_slice(&[0, 0, 1, HEADERS, END_STREAM | END_HEADERS, 0, 0, 0, 1, 0x88]);
        let addr = raw_backend(wire, Duration::from_secs(5)).await;
        let send = client(addr).await;
        let req = request("GET", addr, "/");
        let first = send.send_request(&req, true).await.unwrap();
        let second = send.send_request(&req, true).await.unwrap();
        assert_eq!(first.response().await.unwrap().status(), 200);
        let e = second.response().await.unwrap_err();
        assert!(e.unprocessed() && e.ends_connection(), "{e:?}");
        let third = send.send_request(&req, true).await;
        assert!(third.is_err(), "no stream after a GOAWAY");
    }

    /// A few hundred bytes of indices naming a 4 KB table entry past the header list limit:
    /// the stream is reset, the connection (and its table) goes on.
    #[tokio::test]
    async fn a_header_list_past_the_limit_resets_only_its_stream() {
        let mut block = vec![0x88, 0x40, 5];
        block.extend_from_slice(b"x-big");
        // The value's length, 4000, on a 7-bit prefix: 127, then 3873 in 7-bit groups.
        block.extend_from_slice(&[0x7f, 0xa1, 0x1e]);
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, 80));
        let mut wire = (block.len() as u32).to_be_bytes()[1..].to_vec();
        wire.extend_from_slice(&[HEADERS, END_STREAM | END_HEADERS, 0, 0, 0, 1]);
        wire.extend_from_slice(&block);
        // Stream 3 uses the entry once: within the limit.
        wire.extend_from_slice(&[
            0,
            0,
            2,
            HEADERS,
            END_STREAM | END_HEADERS,
            0,
            0,
            0,
            3,
            0x88,
            0xbe,
        ]);
        let addr = raw_backend(wire, Duration::from_secs(5)).await;
        let send = client(addr).await;
        let req = request("GET", addr, "/");
        let first = send.send_request(&req, true).await.unwrap();
        let second = send.send_request(&req, true).await.unwrap();
        assert_eq!(
            first.response().await.unwrap_err(),
            Error::Reset {
                reason: Reason::PROTOCOL_ERROR,
                remote: false
            }
        );
        let head = second.response().await.unwrap();
        assert_eq!(head.headers()["x-big"].len(), 4000);
    }

    /// A backend that writes its responses whole before it reads a byte, with small socket
    /// buffers both ways: this side must read while its own large writes wait, or neither side
    /// moves again.
    #[tokio::test]
    async fn a_backend_that_writes_before_it_reads_does_not_stall_the_connection() {
        const STREAMS: u32 = 4;
        const LEN: usize = 1 << 20;
        let small = || {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(32 * 1024).unwrap();
            socket.set_send_buffer_size(32 * 1024).unwrap();
            socket
        };
        let listening = small();
        listening.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = listening.listen(8).unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut preface = [0u8; 24];
            s.read_exact(&mut preface).await.unwrap();
            // The client's streams are open by now.
            tokio::time::sleep(Duration::from_millis(100)).await;
            // SETTINGS_INITIAL_WINDOW_SIZE 16 MiB, and as much more for the connection.
            let mut wire = vec![0, 0, 6, SETTINGS, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0];
            wire.extend_from_slice(&[0, 0, 4, WINDOW_UPDATE, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
            for i in 0..STREAMS {
                let id = (1 + 2 * i).to_be_bytes();
                wire.extend_from_slice(&[
                    0,
                    0,
                    1,
                    HEADERS,
                    END_HEADERS,
                    id[0],
                    id[1],
                    id[2],
                    id[3],
                    0x88,
                ]);
                let frames = LEN / MAX_FRAME;
                for f in 0..frames {
                    let flags = if f + 1 == frames { END_STREAM } else { 0 };
                    wire.extend_from_slice(&[0, 0x40, 0, DATA, flags, id[0], id[1], id[2], id[3]]);
                    wire.extend(std::iter::repeat_n(b'r', MAX_FRAME));
                }
            }
            s.write_all(&wire).await.unwrap();
            let mut sink = vec![0u8; 1 << 16];
            while s.read(&mut sink).await.unwrap_or(0) > 0 {}
        });
        let tcp = small().connect(addr).await.unwrap();
        let (send, conn) = handshake(tcp, 1 << 20, 8 << 20);
        tokio::spawn(conn.run());
        let req = request("POST", addr, "/");
        let mut streams = Vec::new();
        for _ in 0..STREAMS {
            streams.push(send.send_request(&req, false).await.unwrap());
        }
        let exchanges = streams.iter().map(|stream| async move {
            let sending = stream.send_data(Bytes::from(vec![b'q'; LEN]), true);
            let receiving = async {
                stream.response().await.unwrap();
                body_of(stream).await.len()
            };
            let (sent, got) = tokio::join!(sending, receiving);
            sent.unwrap();
            got
        });
        let all = futures::future::join_all(exchanges);
        let got = tokio::time::timeout(Duration::from_secs(20), all)
            .await
            .expect("stalled");
        assert!(got.iter().all(|&n| n == LEN), "{got:?}");
    }

    /// A backend that answers whole and closes the connection at once: the answer is read
    /// whole after the connection is gone.
    #[tokio::test]
    async fn a_whole_response_outlives_its_connection() {
        let mut wire = vec![0, 0, 1, HEADERS, END_HEADERS, 0, 0, 0, 1, 0x88];
        wire.extend_from_slice(&[0, 0, 4, DATA, END_STREAM, 0, 0, 0, 1]);
        wire.extend_from_slice(b"done");
        let addr = raw_backend(wire, Duration::ZERO).await;
        let send = client(addr).await;
        let req = request("GET", addr, "/");
        let stream = send.send_request(&req, true).await.unwrap();
        // The close is read before the stream asks for anything.
        for _ in 0..100 {
            if send.send_request(&req, true).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(stream.response().await.unwrap().status(), 200);
        assert_eq!(stream.data().await.unwrap().unwrap(), "done");
        assert!(stream.data().await.is_none(), "ended, not broken");
        assert_eq!(stream.trailers().await.unwrap(), None);
    }

    /// Our server on 127.0.0.1 allowing `max` streams, each request served by `serve`.
    async fn our_server<F, Fut>(max: u32, serve: F) -> SocketAddr
    where
        F: Fn(Request<()>, Stream) -> Fut + Send + Sync + Clone + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let settings = ServerSettings {
            max_streams: max,
            stream_window: 65_535,
            connection_window: 1 << 20,
            max_header_list: 65_536,
        };
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let serve = serve.clone();
                tokio::spawn(async move {
                    let (incoming, conn) = accept(tcp, settings);
                    tokio::spawn(conn.run());
                    while let Some((head, stream)) = incoming.accept().await {
                        tokio::spawn(serve.clone()(head, stream));
                    }
                });
            }
        });
        addr
    }

    /// Our server's echo: the request body back, with the request's method, target and
    /// authority as fields, and trailers naming how much came and the request's own trailer.
    async fn serve_echo(head: Request<()>, stream: Stream) {
        let got = body_of(&stream).await;
        let asked = stream
            .trailers()
            .await
            .unwrap()
            .and_then(|t| t.get("x-asked").cloned());
        let mut response = Response::new(());
        let fields = response.headers_mut();
        fields.insert("x-method", head.method().as_str().parse().unwrap());
        fields.insert("x-target", head.uri().to_string().parse().unwrap());
        let len = got.len();
        stream.send_response(&response, false).unwrap();
        stream.send_data(Bytes::from(got), false).await.unwrap();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-len", len.into());
        if let Some(asked) = asked {
            trailers.insert("x-asked", asked);
        }
        stream.send_trailers(&trailers).unwrap();
    }

    /// An `h2` client to our server: bodies past every window both ways, with trailers, on
    /// streams at once.
    #[tokio::test]
    async fn an_h2_client_is_served_bodies_and_trailers_both_ways() {
        let addr = our_server(100, serve_echo).await;
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let calls = [0usize, 1, 70_000, 3 << 20].map(|len| {
            let mut send = send.clone();
            async move {
                let req = http::Request::post(format!("http://{addr}/echo?n={len}"))
                    .body(())
                    .unwrap();
                let (response, mut body) = send.send_request(req, false).unwrap();
                let sent: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                let mut rest = Bytes::from(sent.clone());
                while !rest.is_empty() {
                    body.reserve_capacity(rest.len());
                    let n = std::future::poll_fn(|cx| body.poll_capacity(cx))
                        .await
                        .unwrap()
                        .unwrap();
                    body.send_data(rest.split_to(n.min(rest.len())), false)
                        .unwrap();
                }
                let mut trailers = HeaderMap::new();
                trailers.insert("x-asked", "yes".parse().unwrap());
                body.send_trailers(trailers).unwrap();
                let (parts, mut got_body) = response.await.unwrap().into_parts();
                assert_eq!(parts.status, 200);
                assert_eq!(parts.headers["x-method"], "POST");
                let target = format!("http://{addr}/echo?n={len}");
                assert_eq!(parts.headers["x-target"], target.as_str());
                let mut got = Vec::new();
                while let Some(chunk) = got_body.data().await {
                    let chunk = chunk.unwrap();
                    got_body
                        .flow_control()
                        .release_capacity(chunk.len())
                        .unwrap();
                    got.extend_from_slice(&chunk);
                }
                let trailers = got_body.trailers().await.unwrap().unwrap();
                assert!(got == sent, "{len}");
                assert_eq!(trailers["x-len"], len.to_string().as_str());
                assert_eq!(trailers["x-asked"], "yes");
            }
        });
        tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(calls))
            .await
            .expect("stalled");
    }

    /// Our client to our server, a request without a body: the two roles agree.
    #[tokio::test]
    async fn our_client_is_served_by_our_server() {
        let addr = our_server(100, serve_echo).await;
        let send = client(addr).await;
        let stream = send
            .send_request(&request("GET", addr, "/x"), true)
            .await
            .unwrap();
        let head = stream.response().await.unwrap();
        assert_eq!(head.headers()["x-method"], "GET");
        assert!(body_of(&stream).await.is_empty());
        assert_eq!(stream.trailers().await.unwrap().unwrap()["x-len"], "0");
    }

    fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A request header block of `fields` as a client codes them.
    fn block(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in fields {
            hpack::field(name.as_bytes(), value.as_bytes(), false, &mut out);
        }
        out
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "a.test"),
        (":path", "/"),
    ];

    /// A raw client of a server connection over an in-memory pipe: `accepted` gets its
    /// requests, which are held unanswered.
    struct Raw {
        wire: tokio::io::DuplexStream,
        incoming: Incoming,
    }

    fn raw_client(max: u32) -> Raw {
        let (wire, ours) = tokio::io::duplex(64 * 1024);
        let settings = ServerSettings {
            max_streams: max,
            stream_window: 65_535,
            connection_window: 65_535,
            max_header_list: 65_536,
        };
        let (incoming, conn) = accept(ours, settings);
        tokio::spawn(conn.run());
        Raw { wire, incoming }
    }

    /// The frames a peer read until `done` says it has what it waits for, or the connection
    /// closed: (kind, flags, stream, payload) each, and whether it closed.
    async fn read_frames(
        wire: &mut tokio::io::DuplexStream,
        done: impl Fn(&[(u8, u8, u32, Vec<u8>)]) -> bool,
    ) -> (Vec<(u8, u8, u32, Vec<u8>)>, bool) {
        let mut got = Vec::new();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            while buf.len() >= 9 {
                let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                if buf.len() < 9 + len {
                    break;
                }
                let id = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]);
                got.push((buf[3], buf[4], id, buf[9..9 + len].to_vec()));
                buf.drain(..9 + len);
            }
            if done(&got) {
                return (got, false);
            }
            let read = tokio::time::timeout(Duration::from_secs(5), wire.read(&mut chunk));
            match read.await.expect("nothing more came") {
                Ok(0) | Err(_) => return (got, true),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn reset_of(frames: &[(u8, u8, u32, Vec<u8>)], id: u32) -> Option<Reason> {
        frames.iter().find_map(|(kind, _, s, p)| {
            (*kind == RST_STREAM && *s == id)
                .then(|| Reason::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]])))
        })
    }

    fn goaway_of(frames: &[(u8, u8, u32, Vec<u8>)]) -> Option<(u32, Reason)> {
        frames.iter().find_map(|(kind, _, _, p)| {
            (*kind == GOAWAY).then(|| {
                let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                (
                    last,
                    Reason::from(u32::from_be_bytes([p[4], p[5], p[6], p[7]])),
                )
            })
        })
    }

    #[tokio::test]
    async fn streams_past_the_servers_limit_are_refused_and_malformed_ones_reset() {
        let mut raw = raw_client(3);
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, 0, &[]));
        let open = END_STREAM | END_HEADERS;
        // 1: taken. 3: no :path. 5: an upper-case name. 7: `te` other than "trailers".
        // 9: a length with no body. 11: a pseudo-field after a regular one. 13, 15: taken,
        // the limit of 3 reached. 17: refused.
        wire.extend(frame(HEADERS, open, 1, &block(&GET)));
        wire.extend(frame(HEADERS, open, 3, &block(&GET[..3])));
        let upper = [&GET[..], &[("X-Up", "1")]].concat();
        wire.extend(frame(HEADERS, open, 5, &block(&upper)));
        let te = [&GET[..], &[("te", "gzip")]].concat();
        wire.extend(frame(HEADERS, open, 7, &block(&te)));
        let length = [&GET[..], &[("content-length", "3")]].concat();
        wire.extend(frame(HEADERS, open, 9, &block(&length)));
        let late = [&GET[..3], &[("x-a", "1"), (":path", "/")]].concat();
        wire.extend(frame(HEADERS, open, 11, &block(&late)));
        for id in [13, 15, 17] {
            wire.extend(frame(HEADERS, open, id, &block(&GET)));
        }
        raw.wire.write_all(&wire).await.unwrap();
        let mut taken = Vec::new();
        for _ in 0..3 {
            let (head, stream) = raw.incoming.accept().await.unwrap();
            assert_eq!(head.uri(), "http://a.test/");
            taken.push(stream.id);
        }
        assert_eq!(taken, [1, 13, 15]);
        let (frames, closed) = read_frames(&mut raw.wire, |f| reset_of(f, 17).is_some()).await;
        assert!(!closed);
        for id in [3, 5, 7, 9, 11] {
            assert_eq!(reset_of(&frames, id), Some(Reason::PROTOCOL_ERROR), "{id}");
        }
        assert_eq!(reset_of(&frames, 17), Some(Reason::REFUSED_STREAM));
        let settings = &frames[0];
        assert_eq!(settings.0, SETTINGS);
        assert!(settings.3.chunks(6).any(|s| s == [0, 3, 0, 0, 0, 3]));
    }

    /// Requests whose header lists are past the limit (a 4 KB field entered in the table, then
    /// named again by index): each answered 431, the one whose body was to come reset as well;
    /// they are not malformed, and the connection goes on.
    #[tokio::test]
    async fn a_header_list_past_the_servers_limit_is_answered_431() {
        let mut raw = raw_client(100);
        let mut big = block(&GET);
        big.extend_from_slice(&[0x40, 5]);
        big.extend_from_slice(b"x-big");
        // The value's length, 4000, on a 7-bit prefix: 127, then 3873 in 7-bit groups.
        big.extend_from_slice(&[0x7f, 0xa1, 0x1e]);
        big.extend(std::iter::repeat_n(b'v', 4000));
        // 17 more times by index: 18 x 4,037 bytes as HTTP/2 counts them, past 65,536.
        big.extend(std::iter::repeat_n(0xbe, 17));
        let again = [&block(&GET)[..], &[0xbe; 18][..]].concat();
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, 0, &[]));
        // 1: its body to come. 3 .. 3 + 2 x MAX_MALFORMED: ended with their headers.
        wire.extend(frame(HEADERS, END_HEADERS, 1, &big));
        let last = 3 + 2 * MAX_MALFORMED as u32;
        for id in (3..=last).step_by(2) {
            wire.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &again));
        }
        wire.extend(frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            last + 2,
            &block(&GET),
        ));
        raw.wire.write_all(&wire).await.unwrap();
        let (head, stream) = raw.incoming.accept().await.unwrap();
        assert_eq!((head.uri().path(), stream.id), ("/", last + 2));
        let (frames, closed) = read_frames(&mut raw.wire, |f| {
            f.iter().filter(|f| f.0 == HEADERS).count() > MAX_MALFORMED + 1
        })
        .await;
        assert!(!closed);
        assert_eq!(goaway_of(&frames), None);
        let mut decoder = Decoder::new(4096);
        let mut answered = Vec::new();
        for (kind, flags, id, payload) in &frames {
            if *kind == HEADERS {
                assert_eq!(flags & END_STREAM, END_STREAM);
                let mut status = Vec::new();
                decoder
                    .decode(&Bytes::copy_from_slice(payload), |f| status.push(f.value))
                    .unwrap();
                assert_eq!(status, ["431"], "{id}");
                answered.push(*id);
            }
        }
        let expected: Vec<u32> = std::iter::once(1).chain((3..=last).step_by(2)).collect();
        assert_eq!(answered, expected);
        assert_eq!(reset_of(&frames, 1), Some(Reason::PROTOCOL_ERROR));
        assert_eq!(reset_of(&frames, 3), None);
    }

    #[tokio::test]
    async fn malformed_requests_to_the_budget_end_the_connection() {
        let mut raw = raw_client(100);
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, 0, &[]));
        for i in 0..MAX_MALFORMED as u32 {
            let id = 2 * i + 1;
            wire.extend(frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                id,
                &block(&GET[..3]),
            ));
        }
        raw.wire.write_all(&wire).await.unwrap();
        let (frames, _) = read_frames(&mut raw.wire, |f| goaway_of(f).is_some()).await;
        let last = 2 * MAX_MALFORMED as u32 - 1;
        assert_eq!(goaway_of(&frames), Some((last, Reason::ENHANCE_YOUR_CALM)));
        assert!(raw.incoming.accept().await.is_none());
    }

    #[tokio::test]
    async fn a_bad_preface_ends_the_connection_unanswered() {
        let mut raw = raw_client(100);
        raw.wire.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let (frames, closed) = read_frames(&mut raw.wire, |_| false).await;
        assert!(closed);
        assert!(frames.iter().all(|f| f.0 == SETTINGS), "{frames:?}");
        assert!(raw.incoming.accept().await.is_none());
    }

    /// A graceful shutdown: GOAWAY naming the last stream; that stream is still answered, a
    /// later one is ignored, and the connection ends when the answer is out.
    #[tokio::test]
    async fn a_graceful_shutdown_finishes_what_was_opened() {
        let mut raw = raw_client(100);
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, 0, &[]));
        wire.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET)));
        raw.wire.write_all(&wire).await.unwrap();
        let (_, stream) = raw.incoming.accept().await.unwrap();
        raw.incoming.graceful_shutdown();
        raw.wire
            .write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &block(&GET)))
            .await
            .unwrap();
        assert!(raw.incoming.accept().await.is_none());
        stream.send_response(&Response::new(()), true).unwrap();
        drop(stream);
        let (frames, closed) = read_frames(&mut raw.wire, |_| false).await;
        assert!(closed, "the connection ends once its streams are done");
        assert_eq!(goaway_of(&frames), Some((1, Reason::NO_ERROR)));
        let answered: Vec<u32> = frames
            .iter()
            .filter(|f| f.0 == HEADERS)
            .map(|f| f.2)
            .collect();
        assert_eq!(answered, [1]);
    }

    /// A client that grants 2 GiB windows and then reads nothing: a stream sending a 16 MiB
    /// body waits once `MAX_UNSENT` is queued, instead of queueing the whole body here; when
    /// the client reads again, all of it comes, in order.
    #[tokio::test]
    async fn a_large_window_does_not_let_a_slow_client_queue_a_whole_body() {
        const CHUNK: usize = 256 * 1024;
        const CHUNKS: usize = 64;
        let mut raw = raw_client(100);
        let mut wire = PREFACE.to_vec();
        // SETTINGS_INITIAL_WINDOW_SIZE 2^31 - 1, and the connection's window raised to it.
        wire.extend(frame(SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
        let more = (MAX_WINDOW - DEFAULT_WINDOW) as u32;
        wire.extend(frame(WINDOW_UPDATE, 0, 0, &more.to_be_bytes()));
        wire.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET)));
        raw.wire.write_all(&wire).await.unwrap();
        let (_, stream) = raw.incoming.accept().await.unwrap();
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&sent);
        let sender = tokio::spawn(async move {
            stream.send_response(&Response::new(()), false).unwrap();
            for i in 0..CHUNKS {
                let chunk = Bytes::from(vec![i as u8; CHUNK]);
                stream.send_data(chunk, i + 1 == CHUNKS).await.unwrap();
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            stream
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let queued = sent.load(std::sync::atomic::Ordering::Relaxed);
        // The queue's bound, one batch in the pipe's writer, and the chunk that crossed it.
        assert!(
            queued <= 3,
            "{queued} chunks of 256 KiB queued for a client that reads nothing"
        );
        let (frames, closed) = read_frames(&mut raw.wire, |f| {
            f.last()
                .is_some_and(|f| f.0 == DATA && f.1 & END_STREAM != 0)
        })
        .await;
        assert!(!closed);
        let body: Vec<u8> = frames
            .iter()
            .filter(|f| f.0 == DATA)
            .flat_map(|f| f.3.iter().copied())
            .collect();
        assert_eq!(body.len(), CHUNK * CHUNKS);
        assert!(
            body.chunks(CHUNK)
                .enumerate()
                .all(|(i, c)| c.iter().all(|&b| b == i as u8))
        );
        drop(sender.await.unwrap());
    }

    /// SETTINGS frames from a client that reads nothing: past a megabyte of acknowledgements
    /// waiting, the server reads no more, so the flood stalls at the client.
    #[tokio::test]
    async fn a_client_that_never_reads_is_not_read_past_the_backlog() {
        let mut raw = raw_client(100);
        let mut wire = PREFACE.to_vec();
        let one = frame(SETTINGS, 0, 0, &[0, 4, 0, 1, 0, 0]);
        // 4 MB of SETTINGS: 2.7 MB of acknowledgements if all were read.
        for _ in 0..300_000 {
            wire.extend_from_slice(&one);
        }
        let written = tokio::time::timeout(Duration::from_secs(2), raw.wire.write_all(&wire));
        assert!(written.await.is_err(), "the whole flood was read");
    }

    /// Content lengths as every codec reads them: no sign, no list; repeated only if equal.
    #[test]
    fn content_length_is_read_as_the_other_codecs_read_it() {
        let of = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(
                    http::header::CONTENT_LENGTH,
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            content_length(&h)
        };
        assert_eq!(of(&[]), Ok(None));
        assert_eq!(of(&["5"]), Ok(Some(5)));
        assert_eq!(of(&["5", "5"]), Ok(Some(5)));
        for bad in [&["+5"][..], &["5, 5"], &["5", "6"], &["-1"], &["0x5"]] {
            assert_eq!(of(bad), Err(()), "{bad:?}");
        }
        assert!(connection_specific(b"connection") && connection_specific(b"upgrade"));
        assert!(connection_specific(b"http2-settings"));
        assert!(!connection_specific(b"te") && !connection_specific(b"x-te"));
    }

    /// Takes the next request and answers it whole at once (a response header with
    /// END_STREAM), dropping its stream, which the server then forgets.
    async fn answer_next(raw: &mut Raw) {
        let (_head, stream) = raw.incoming.accept().await.unwrap();
        stream
            .send_response(&Response::new(()), true)
            .expect("answered");
        drop(stream);
    }

    /// The server's SETTINGS came: the connection is up.
    fn settled(frames: &[(u8, u8, u32, Vec<u8>)]) -> bool {
        frames.iter().any(|(k, _, _, _)| *k == SETTINGS)
    }

    /// Opens `raw` with the preface and an empty SETTINGS, then `frames`; returns what the
    /// server wrote until `done` holds or it closed.
    async fn exchange(
        raw: &mut Raw,
        frames: &[Vec<u8>],
        done: impl Fn(&[(u8, u8, u32, Vec<u8>)]) -> bool,
    ) -> (Vec<(u8, u8, u32, Vec<u8>)>, bool) {
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, 0, &[]));
        for f in frames {
            wire.extend_from_slice(f);
        }
        raw.wire.write_all(&wire).await.unwrap();
        read_frames(&mut raw.wire, done).await
    }

    /// h2spec 5.1/5, 5.1/6, 6.1/2: after the client's END_STREAM the stream is half-closed
    /// (remote): a DATA or HEADERS frame on it is a stream error STREAM_CLOSED.
    #[tokio::test]
    async fn frames_after_the_clients_end_stream_are_stream_closed() {
        for late in [
            frame(DATA, END_STREAM, 1, b"test"),
            frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET)),
        ] {
            let mut raw = raw_client(10);
            let open = frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET));
            let (got, _) = exchange(&mut raw, &[open], settled).await;
            assert!(!got.is_empty());
            // Held unanswered: the stream is half-closed (remote) when the frame comes.
            let (_head, stream) = raw.incoming.accept().await.unwrap();
            raw.wire.write_all(&late).await.unwrap();
            let (got, _) = read_frames(&mut raw.wire, |f| reset_of(f, 1).is_some()).await;
            assert_eq!(reset_of(&got, 1), Some(Reason::STREAM_CLOSED), "{got:?}");
            drop(stream);
        }
    }

    /// h2spec 5.1/8, 5.1/9: after the client's RST_STREAM, a DATA or HEADERS frame on the
    /// stream is a stream error STREAM_CLOSED (whether the stream is still here or gone).
    #[tokio::test]
    async fn frames_after_the_clients_reset_are_stream_closed() {
        for late in [
            frame(DATA, END_STREAM, 1, b"test"),
            frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET)),
        ] {
            let mut raw = raw_client(10);
            let open = frame(HEADERS, END_HEADERS, 1, &block(&GET));
            let cancel = frame(RST_STREAM, 0, 1, &u32::from(Reason::CANCEL).to_be_bytes());
            let (got, closed) = exchange(&mut raw, &[open, cancel, late], |f| {
                reset_of(f, 1).is_some() || goaway_of(f).is_some()
            })
            .await;
            assert_eq!(reset_of(&got, 1), Some(Reason::STREAM_CLOSED), "{got:?}");
            assert!(
                !closed && goaway_of(&got).is_none(),
                "a stream error only: {got:?}"
            );
        }
    }

    /// h2spec 5.1/11, 5.1/12: on a stream closed both ways after the client's END_STREAM,
    /// a further frame is a connection error STREAM_CLOSED.
    #[tokio::test]
    async fn frames_on_a_stream_closed_both_ways_end_the_connection() {
        for late in [
            frame(DATA, END_STREAM, 1, b"test"),
            frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET)),
        ] {
            let mut raw = raw_client(10);
            let open = frame(HEADERS, END_STREAM | END_HEADERS, 1, &block(&GET));
            exchange(&mut raw, &[open], settled).await;
            answer_next(&mut raw).await;
            let (got, _) = read_frames(&mut raw.wire, |f| {
                f.iter()
                    .any(|(k, fl, id, _)| *k == HEADERS && *id == 1 && fl & END_STREAM != 0)
            })
            .await;
            assert!(!got.is_empty());
            raw.wire.write_all(&late).await.unwrap();
            let (got, _) = read_frames(&mut raw.wire, |f| goaway_of(f).is_some()).await;
            assert_eq!(
                goaway_of(&got).map(|g| g.1),
                Some(Reason::STREAM_CLOSED),
                "{got:?}"
            );
        }
    }

    /// h2spec 6.9/2: a WINDOW_UPDATE of 0 on a stream is a stream error PROTOCOL_ERROR, also
    /// when the stream was answered and forgotten before it came.
    #[tokio::test]
    async fn a_zero_window_update_on_a_finished_stream_is_still_an_error() {
        let mut raw = raw_client(10);
        let open = frame(HEADERS, END_HEADERS, 1, &block(&GET));
        exchange(&mut raw, &[open], settled).await;
        // Answered whole, the request's body not ended: reset NO_ERROR and forgotten.
        answer_next(&mut raw).await;
        let (got, _) = read_frames(&mut raw.wire, |f| reset_of(f, 1).is_some()).await;
        assert_eq!(reset_of(&got, 1), Some(Reason::NO_ERROR), "{got:?}");
        raw.wire
            .write_all(&frame(WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes()))
            .await
            .unwrap();
        let (got, closed) = read_frames(&mut raw.wire, |f| reset_of(f, 1).is_some()).await;
        assert_eq!(reset_of(&got, 1), Some(Reason::PROTOCOL_ERROR), "{got:?}");
        assert!(!closed);
        // h2spec 8.1/1 the same way: a second HEADERS without END_STREAM cannot be trailers,
        // answered or not; trailers that can be are ignored.
        raw.wire
            .write_all(&frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                1,
                &block(&[("x-t", "1")]),
            ))
            .await
            .unwrap();
        raw.wire
            .write_all(&frame(HEADERS, END_HEADERS, 1, &block(&[("x-t", "1")])))
            .await
            .unwrap();
        let (got, _) = read_frames(&mut raw.wire, |f| reset_of(f, 1).is_some()).await;
        assert_eq!(reset_of(&got, 1), Some(Reason::PROTOCOL_ERROR), "{got:?}");
        assert_eq!(got.len(), 1, "one reset, for the second: {got:?}");
        // h2spec 6.9.1/3 on stream 3 the same way: past the largest window, FLOW_CONTROL_ERROR.
        let open = frame(HEADERS, END_HEADERS, 3, &block(&GET));
        raw.wire.write_all(&open).await.unwrap();
        answer_next(&mut raw).await;
        let (got, _) = read_frames(&mut raw.wire, |f| reset_of(f, 3).is_some()).await;
        assert_eq!(reset_of(&got, 3), Some(Reason::NO_ERROR), "{got:?}");
        let most = frame(WINDOW_UPDATE, 0, 3, &0x7fff_ffffu32.to_be_bytes());
        raw.wire.write_all(&most).await.unwrap();
        let (got, _) = read_frames(&mut raw.wire, |f| reset_of(f, 3).is_some()).await;
        assert_eq!(
            reset_of(&got, 3),
            Some(Reason::FLOW_CONTROL_ERROR),
            "{got:?}"
        );
    }

    /// h2spec 5.1.1/2: a HEADERS frame on a stream id below the last one the client opened,
    /// never opened itself, is a connection error PROTOCOL_ERROR.
    #[tokio::test]
    async fn a_stream_id_below_the_last_opened_ends_the_connection() {
        let mut raw = raw_client(10);
        let open = END_STREAM | END_HEADERS;
        let (got, _) = exchange(
            &mut raw,
            &[
                frame(HEADERS, open, 5, &block(&GET)),
                frame(HEADERS, open, 3, &block(&GET)),
            ],
            |f| goaway_of(f).is_some(),
        )
        .await;
        assert_eq!(
            goaway_of(&got),
            Some((5, Reason::PROTOCOL_ERROR)),
            "{got:?}"
        );
    }

    /// h2spec 5.3.1/1, 5.3.1/2: a stream that depends on itself, in its HEADERS or in a
    /// PRIORITY frame, is a PROTOCOL_ERROR; other streams are served on.
    #[tokio::test]
    async fn a_stream_depending_on_itself_is_a_protocol_error() {
        let mut raw = raw_client(10);
        let mut prioritised = 1u32.to_be_bytes().to_vec();
        prioritised.push(16);
        prioritised.extend(block(&GET));
        let (got, closed) = exchange(
            &mut raw,
            &[frame(
                HEADERS,
                END_STREAM | END_HEADERS | PRIORITY_FLAG,
                1,
                &prioritised,
            )],
            |f| reset_of(f, 1).is_some(),
        )
        .await;
        assert_eq!(reset_of(&got, 1), Some(Reason::PROTOCOL_ERROR), "{got:?}");
        assert!(!closed);
        // The next stream is served; a PRIORITY of an open stream on itself resets it.
        let open = frame(HEADERS, END_HEADERS, 3, &block(&GET));
        raw.wire.write_all(&open).await.unwrap();
        let (_head, stream) = raw.incoming.accept().await.unwrap();
        assert_eq!(stream.id, 3);
        let mut on_itself = 3u32.to_be_bytes().to_vec();
        on_itself.push(16);
        raw.wire
            .write_all(&frame(PRIORITY, 0, 3, &on_itself))
            .await
            .unwrap();
        let (got, _) = read_frames(&mut raw.wire, |f| reset_of(f, 3).is_some()).await;
        assert_eq!(reset_of(&got, 3), Some(Reason::PROTOCOL_ERROR), "{got:?}");
        // On an idle stream, where no reset may go: the connection's error.
        let mut idle = 7u32.to_be_bytes().to_vec();
        idle.push(16);
        raw.wire
            .write_all(&frame(PRIORITY, 0, 7, &idle))
            .await
            .unwrap();
        let (got, _) = read_frames(&mut raw.wire, |f| goaway_of(f).is_some()).await;
        assert_eq!(goaway_of(&got).map(|g| g.1), Some(Reason::PROTOCOL_ERROR));
    }

    /// h2spec 6.5.2/1: SETTINGS_ENABLE_PUSH above 1 is a connection error PROTOCOL_ERROR;
    /// 0 and 1 from a client are fine.
    #[tokio::test]
    async fn enable_push_above_one_ends_the_connection() {
        let setting = |value: u32| {
            let mut p = 2u16.to_be_bytes().to_vec();
            p.extend(value.to_be_bytes());
            frame(SETTINGS, 0, 0, &p)
        };
        for ok in [0, 1] {
            let mut raw = raw_client(10);
            let (got, _) = exchange(&mut raw, &[setting(ok)], |f| {
                f.iter()
                    .filter(|(k, fl, _, _)| *k == SETTINGS && fl & ACK != 0)
                    .count()
                    == 2
            })
            .await;
            assert!(goaway_of(&got).is_none(), "{ok}: {got:?}");
        }
        let mut raw = raw_client(10);
        let (got, _) = exchange(&mut raw, &[setting(2)], |f| goaway_of(f).is_some()).await;
        assert_eq!(goaway_of(&got).map(|g| g.1), Some(Reason::PROTOCOL_ERROR));
    }
}
