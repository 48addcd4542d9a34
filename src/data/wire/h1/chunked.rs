//! The end of a chunked response body, found as the bytes pass (RFC 9112 §7.1): the fast
//! path relays chunked bodies as they come and must know exactly where one ends, so that the
//! backend connection is reused only when nothing follows. It copies nothing: it says where the
//! end is and, for a client that takes the body without HTTP/1 framing (an HTTP/2 stream),
//! where the data bytes are. Anything malformed is an error, never a guess.

/// Finds the end of a chunked body fed in pieces, counting its data bytes (RFC 9112 §7.1).
#[derive(Debug, Default)]
pub struct Chunks {
    state: ChunkState,
    size: u64,
    digits: u8,
    /// Bytes of the current size line, extension included.
    line: usize,
    /// Data bytes seen so far.
    pub data: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    EndLf,
    Done,
}

/// Longest chunk-size line (with extensions) or trailer line accepted.
const MAX_CHUNK_LINE: usize = 4096;

impl Chunks {
    /// Feeds `bytes`; `Some(n)` when the body ends after the first `n` of them; `Err` when
    /// the framing is broken.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, ChunkError> {
        self.feed_data(bytes, |_| {})
    }

    /// As `feed`, telling `data` each run of data bytes (offsets into `bytes`), in order.
    pub fn feed_data(
        &mut self,
        bytes: &[u8],
        mut data: impl FnMut(std::ops::Range<usize>),
    ) -> Result<Option<usize>, ChunkError> {
        use ChunkState::*;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let d = (b as char).to_digit(16).ok_or(ChunkError)?;
                        if self.digits >= 15 {
                            return Err(ChunkError);
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => self.state = Extension,
                    b'\r' if self.digits > 0 => self.state = SizeLf,
                    b'\n' if self.digits > 0 => self.end_size_line(),
                    _ => return Err(ChunkError),
                },
                Extension => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' => self.end_size_line(),
                    _ => {}
                },
                SizeLf if b == b'\n' => self.end_size_line(),
                Data => {
                    let n = usize::try_from(self.size)
                        .map_or(bytes.len() - i, |s| s.min(bytes.len() - i));
                    self.size -= n as u64;
                    self.data += n as u64;
                    data(i..i + n);
                    i += n;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr if b == b'\r' => self.state = DataLf,
                DataCr | DataLf if b == b'\n' => {
                    self.state = Size;
                    self.size = 0;
                    self.digits = 0;
                    self.line = 0;
                }
                TrailerStart => match b {
                    b'\r' => self.state = EndLf,
                    b'\n' => {
                        self.state = Done;
                        return Ok(Some(i + 1));
                    }
                    _ => self.state = Trailer,
                },
                Trailer => {
                    if b == b'\n' {
                        self.state = TrailerStart;
                        self.line = 0;
                    }
                }
                EndLf if b == b'\n' => {
                    self.state = Done;
                    return Ok(Some(i + 1));
                }
                Done => return Ok(Some(i)),
                _ => return Err(ChunkError),
            }
            if matches!(self.state, Size | Extension | SizeLf | Trailer) {
                self.line += 1;
                if self.line > MAX_CHUNK_LINE {
                    return Err(ChunkError);
                }
            }
            i += 1;
        }
        Ok(None)
    }

    fn end_size_line(&mut self) {
        self.line = 0;
        self.state = if self.size == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        };
    }
}

/// A chunked body whose framing is broken (a bad size, a missing CRLF, an over-long line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked body")]
pub struct ChunkError;

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(pieces: &[&str]) -> Result<Option<usize>, ChunkError> {
        let mut c = Chunks::default();
        let mut total = 0;
        for p in pieces {
            if let Some(n) = c.feed(p.as_bytes())? {
                return Ok(Some(total + n));
            }
            total += p.len();
        }
        Ok(None)
    }

    #[test]
    fn the_end_of_a_chunked_body_is_found_across_pieces() {
        let body = "4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\n\r\nNEXT";
        assert_eq!(chunked(&[body]), Ok(Some(body.len() - 4)));
        let pieces: Vec<String> = body.chars().map(String::from).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        assert_eq!(chunked(&refs), Ok(Some(body.len() - 4)));
        assert_eq!(
            chunked(&["0\r\nTrailer: x\r\n\r\n"]),
            Ok(Some("0\r\nTrailer: x\r\n\r\n".len()))
        );
        assert_eq!(chunked(&["4\r\nWik"]), Ok(None));
        assert_eq!(chunked(&["x\r\n"]), Err(ChunkError));
        assert_eq!(chunked(&["4\r\nWikiX\r\n"]), Err(ChunkError));
        assert_eq!(chunked(&["fffffffffffffffff\r\n"]), Err(ChunkError));
        let mut c = Chunks::default();
        assert_eq!(c.feed(b"3\r\nabc\r\n10\r\n"), Ok(None));
        assert_eq!(c.data, 3);
    }

    #[test]
    fn the_data_of_a_chunked_body_is_told_across_pieces() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for size in [1, 3, body.len()] {
            let mut c = Chunks::default();
            let mut out = Vec::new();
            let mut end = None;
            for (k, piece) in body.chunks(size).enumerate() {
                let r = c.feed_data(piece, |d| out.extend_from_slice(&piece[d]));
                if let Some(n) = r.unwrap() {
                    end = Some(k * size + n);
                    break;
                }
            }
            assert_eq!(out, b"Wikipedia", "pieces of {size}");
            assert_eq!(end, Some(body.len() - 4));
        }
    }
}
