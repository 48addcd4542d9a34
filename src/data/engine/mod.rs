//! The engines: each serves requests of one kind of client connection by carrying out what
//! `decide` says on its own wire representation, and holds no request policy of its own.
//! `h1` is the fast path's HTTP/1 exchange (and `FastPath`, the fast path of one frontend);
//! `http2` accepts an HTTP/2 connection's streams, which `h2` (plain GET/HEAD, served by the
//! HTTP/1 exchange), `relay` (to HTTP/2 backends, frame by frame) or, through `h2_bridge`,
//! Pingora take; `client_stream` is an HTTP/2 stream as those see it. `pingora` is the
//! fallback seam: Pingora's `ProxyHttp` for what the fast path declines (request bodies to
//! HTTP/1 backends, upgrades and tunnels, Gateway filters, HTTP/1.0 and odd framing). `tcp`
//! relays raw TCP services. Engines name the codecs (`wire`), the pools (`upstream`) and the
//! frontend; nothing below names an engine.

pub mod client_stream;
pub mod h1;
pub mod h2;
pub mod h2_bridge;
pub mod http2;
pub mod pingora;
pub mod relay;
pub mod tcp;
