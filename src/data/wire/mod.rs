//! What every codec of the data plane agrees on, written once: which fields belong to a
//! connection rather than to a message, and how a `content-length` reads. The HTTP/1 request
//! and response codecs, the HTTP/2 connection and the mirror's copies all ask here, so that
//! no two of them drift (they had four lists and three length parsers). Pure: no sockets, no
//! allocation, no policy (which fields a route adds or strips is `decide::edits`).

pub mod fields;
