//! The engines: each serves requests of one kind of client connection by carrying out what
//! `decide` says on its own wire representation, and holds no request policy of its own.
//! The fast path is `fast` (`FastPath`, one frontend's, and the per-connection state), its
//! fronts `h1` (the HTTP/1 keep-alive loop) and `h2` (an HTTP/2 stream), and its upstreams
//! `h1_upstream` (HTTP/1.1 backends) and `relay` (HTTP/2 backends, frame by frame); the one
//! request driver between a front and an upstream is `data::exchange`. `http2` accepts an
//! HTTP/2 connection's streams; `client_stream` is such a stream as the fast path sees it;
//! what the fast path does not carry goes, through `h2_bridge` for HTTP/2 streams, to
//! `pingora`, the fallback seam: Pingora's `ProxyHttp` (request bodies to HTTP/1 backends,
//! upgrades and tunnels, Gateway filters, HTTP/1.0 and odd framing). `tcp` relays raw TCP
//! services and Gateway TCP and TLS listeners, `udp` Gateway UDP listeners' flows. Engines name the codecs (`wire`), the pools (`upstream`) and the frontend;
//! nothing below names an engine.

pub mod client_stream;
pub mod fast;
pub mod gateway_ports;
pub mod h1;
pub mod h1_upstream;
pub mod h2;
pub mod h2_bridge;
pub mod http2;
pub mod pingora;
mod ports;
pub mod relay;
pub mod tcp;
pub mod udp;
