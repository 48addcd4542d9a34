//! The data plane's codecs, below every engine: what goes on the wire and how it reads, with
//! no routing, no table and no request policy (which fields a route adds or strips, which
//! status answers a request, is `decide`'s). `fields` is what every codec agrees on — which
//! fields belong to a connection rather than to a message, and how a `content-length` reads —
//! written once, so that no two codecs drift (they had four lists and three length parsers);
//! `h1` parses and writes HTTP/1 heads and chunked bodies in place; `hpack` and `h2` are the
//! fast path's HTTP/2 (header compression, the connection in both roles, the batched writer);
//! `proxy_protocol` reads and writes the PROXY header. Nothing here may name an engine, the
//! upstream pools or the frontend.

pub mod fields;
pub mod h1;
pub mod h2;
pub mod hpack;
pub mod proxy_protocol;
