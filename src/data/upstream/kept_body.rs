//! The request body the HTTP/2 relay has sent to a backend, kept so that a further try can send
//! it again (`decide::attempt::Sent::replayable` says when one may), up to the 64 KiB that
//! Pingora's proxy keeps (its `BODY_BUF_LIMIT`). The chunks are kept as they came, shared and
//! not copied, so that a call of one message (most gRPC calls) costs no allocation: Pingora's
//! own buffer copies every body into one it allocates. It only counts and holds; it must not
//! read or write anything.

use bytes::{Bytes, BytesMut};

/// At most this much of a body is kept; a longer one cannot be sent again.
pub const LIMIT: usize = 64 * 1024;

/// What went of one request's body, as far as it is kept.
#[derive(Debug, Default)]
pub struct KeptBody {
    first: Option<Bytes>,
    rest: Vec<Bytes>,
    len: usize,
    /// More went than `LIMIT`: nothing is kept any more.
    truncated: bool,
}

impl KeptBody {
    /// Keeps `chunk`, which is about to go to the backend.
    pub fn keep(&mut self, chunk: &Bytes) {
        if self.truncated {
            return;
        }
        self.len += chunk.len();
        if self.len > LIMIT {
            *self = Self {
                truncated: true,
                ..Self::default()
            };
        } else if self.first.is_none() {
            self.first = Some(chunk.clone());
        } else {
            self.rest.push(chunk.clone());
        }
    }

    /// All that went is still here.
    pub fn whole(&self) -> bool {
        !self.truncated
    }

    /// What went, as one piece (copied only when it came in more than one).
    pub fn body(&self) -> Bytes {
        match (&self.first, self.rest.is_empty()) {
            (None, _) => Bytes::new(),
            (Some(first), true) => first.clone(),
            (Some(first), false) => {
                let mut all = BytesMut::with_capacity(self.len);
                all.extend_from_slice(first);
                for chunk in &self.rest {
                    all.extend_from_slice(chunk);
                }
                all.freeze()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_kept_in_order_until_the_limit() {
        let mut kept = KeptBody::default();
        assert!(kept.whole());
        assert_eq!(kept.body(), Bytes::new());
        let one = Bytes::from_static(b"hel");
        kept.keep(&one);
        // One chunk: the same bytes, shared.
        assert_eq!(kept.body().as_ptr(), one.as_ptr());
        kept.keep(&Bytes::from_static(b""));
        kept.keep(&Bytes::from_static(b"lo"));
        assert_eq!(kept.body(), Bytes::from_static(b"hello"));
        assert!(kept.whole());

        let mut full = KeptBody::default();
        full.keep(&Bytes::from(vec![b'x'; LIMIT]));
        assert!(full.whole());
        assert_eq!(full.body().len(), LIMIT);
        full.keep(&Bytes::from_static(b"y"));
        assert!(!full.whole());
        // Nothing comes back once it is past the limit, even if more is kept after.
        full.keep(&Bytes::from_static(b"z"));
        assert!(!full.whole());
        assert_eq!(full.body(), Bytes::new());
    }
}
