//! Decoding a header block (RFC 7541 §6): each field as it comes, names and values shared with
//! the block's buffer when they are not Huffman-coded, the dynamic table kept as the peer's
//! encoder fills it. It checks the block's encoding only: whether the names and values are
//! valid HTTP fields, and how large a field list may be, is the connection's to judge.

use bytes::Bytes;

use super::huffman::{self, HuffmanError};
use super::table::DynamicTable;

/// One decoded field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: Bytes,
    pub value: Bytes,
    /// Sent "never indexed" (§6.2.3): a proxy passes it on the same way.
    pub sensitive: bool,
}

/// Why a header block was refused: a connection error of type COMPRESSION_ERROR, as the
/// decoder's table may no longer match the peer's (RFC 9113 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the header block ends inside a field")]
    Truncated,
    #[error("an integer above 2^28")]
    IntegerTooLarge,
    #[error("index {0} is in neither table")]
    BadIndex(usize),
    #[error("a Huffman-coded string: {0}")]
    Huffman(#[from] HuffmanError),
    #[error("a table size update to {0} bytes, above the {1} allowed")]
    SizeAboveLimit(usize, usize),
    #[error("a table size update after a field")]
    LateSizeUpdate,
    #[error("no table size update at or below {0} bytes after the limit was lowered")]
    MissingSizeUpdate(usize),
}

/// One direction's decoder: the dynamic table the peer's encoder fills.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// The most the peer may make the table: our `SETTINGS_HEADER_TABLE_SIZE`.
    limit: usize,
    /// The limit was lowered: the next block must start with an update at or below it.
    lowered: Option<usize>,
}

impl Decoder {
    /// A decoder whose peer may use up to `limit` bytes of table (4096 unless our settings
    /// say otherwise).
    pub fn new(limit: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(limit),
            limit,
            lowered: None,
        }
    }

    /// A new `SETTINGS_HEADER_TABLE_SIZE` of ours, acknowledged by the peer.
    pub fn set_limit(&mut self, limit: usize) {
        if limit < self.limit {
            self.lowered = Some(self.lowered.map_or(limit, |l| l.min(limit)));
        }
        self.limit = limit;
    }

    /// Decodes a whole header block (HEADERS and CONTINUATION payloads joined), handing each
    /// field to `each` in order.
    pub fn decode(
        &mut self,
        block: &Bytes,
        mut each: impl FnMut(Field),
    ) -> Result<(), DecodeError> {
        let mut at = 0;
        let mut fields = false;
        if let Some(lowered) = self.lowered.take() {
            let first = block.first().copied().unwrap_or(0);
            let mut probe = 0;
            if first & 0xe0 != 0x20 || int(block, &mut probe, 5)? > lowered {
                return Err(DecodeError::MissingSizeUpdate(lowered));
            }
        }
        while let Some(&first) = block.get(at) {
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = int(block, &mut at, 7)?;
                let (name, value) = self.table.get(index).ok_or(DecodeError::BadIndex(index))?;
                each(Field {
                    name,
                    value,
                    sensitive: false,
                });
            } else if first & 0xc0 == 0x40 {
                // Literal with incremental indexing (§6.2.1).
                let (name, value) = self.literal(block, &mut at, 6)?;
                self.table.insert(&name, &value);
                each(Field {
                    name,
                    value,
                    sensitive: false,
                });
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first field.
                if fields {
                    return Err(DecodeError::LateSizeUpdate);
                }
                let size = int(block, &mut at, 5)?;
                if size > self.limit {
                    return Err(DecodeError::SizeAboveLimit(size, self.limit));
                }
                self.table.set_max(size);
                continue;
            } else {
                // Literal without indexing (0000) or never indexed (0001), §6.2.2-3.
                let (name, value) = self.literal(block, &mut at, 4)?;
                each(Field {
                    name,
                    value,
                    sensitive: first & 0x10 != 0,
                });
            }
            fields = true;
        }
        Ok(())
    }

    /// A literal field's name (indexed, or a string when the index is 0) and value.
    fn literal(
        &self,
        block: &Bytes,
        at: &mut usize,
        prefix: u8,
    ) -> Result<(Bytes, Bytes), DecodeError> {
        let index = int(block, at, prefix)?;
        let name = match index {
            0 => string(block, at)?,
            _ => self.table.get(index).ok_or(DecodeError::BadIndex(index))?.0,
        };
        Ok((name, string(block, at)?))
    }
}

/// The integer at `at` with a `prefix`-bit prefix (§5.1), `at` moved past it. Values above
/// 2^28 are refused: nothing in a block of at most a few frames needs one.
pub(super) fn int(block: &[u8], at: &mut usize, prefix: u8) -> Result<usize, DecodeError> {
    let mask = (1usize << prefix) - 1;
    let first = *block.get(*at).ok_or(DecodeError::Truncated)? as usize & mask;
    *at += 1;
    if first < mask {
        return Ok(first);
    }
    let mut value = mask;
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(DecodeError::Truncated)?;
        *at += 1;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(DecodeError::IntegerTooLarge);
        }
    }
}

/// The string at `at` (§5.2), `at` moved past it: a share of the block when sent as is, a new
/// buffer when Huffman-coded.
fn string(block: &Bytes, at: &mut usize) -> Result<Bytes, DecodeError> {
    let huffman = block.get(*at).ok_or(DecodeError::Truncated)? & 0x80 != 0;
    let len = int(block, at, 7)?;
    let end = at
        .checked_add(len)
        .filter(|&end| end <= block.len())
        .ok_or(DecodeError::Truncated)?;
    let raw = &block[*at..end];
    let s = if huffman {
        let mut out = Vec::new();
        huffman::decode(raw, &mut out)?;
        Bytes::from(out)
    } else {
        block.slice(*at..end)
    };
    *at = end;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Bytes {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    fn fields(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(&hex(block), |f| {
            let s = |b: &Bytes| String::from_utf8(b.to_vec()).unwrap();
            out.push((s(&f.name), s(&f.value)));
        })
        .unwrap();
        out
    }

    fn list(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// RFC 7541 C.3 (requests, no Huffman) and C.4 (the same, Huffman-coded): three blocks on
    /// one connection, each using the entries the previous added.
    #[test]
    fn decodes_the_rfc_request_examples() {
        let first = list(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ]);
        let mut second = first.clone();
        second.push(("cache-control".into(), "no-cache".into()));
        let third = list(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ]);
        let plain = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        let huffman = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        for blocks in [plain, huffman] {
            let mut d = Decoder::new(4096);
            assert_eq!(fields(&mut d, blocks[0]), first);
            assert_eq!(fields(&mut d, blocks[1]), second);
            assert_eq!(fields(&mut d, blocks[2]), third);
            assert_eq!(d.table.len(), 3);
            assert_eq!(d.table.size(), 164);
        }
    }

    /// RFC 7541 C.5 and C.6: responses with a 256-byte table, the second evicting the first's
    /// `:status`.
    #[test]
    fn decodes_the_rfc_response_examples_with_eviction() {
        let date = "Mon, 21 Oct 2013 20:13:21 GMT";
        let response = |status| {
            list(&[
                (":status", status),
                ("cache-control", "private"),
                ("date", date),
                ("location", "https://www.example.com"),
            ])
        };
        let mut plain_first = String::from("4803 333032 5807 70726976617465 611d");
        plain_first += &date.bytes().map(|b| format!("{b:02x}")).collect::<String>();
        plain_first += "6e17";
        plain_first += &"https://www.example.com"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        let pairs = [
            (plain_first.as_str(), "4803 3330 37c1 c0bf"),
            (
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 \
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ffc1 c0bf",
            ),
        ];
        for (first, second) in pairs {
            let mut d = Decoder::new(256);
            assert_eq!(fields(&mut d, first), response("302"));
            assert_eq!(d.table.size(), 222);
            assert_eq!(fields(&mut d, second), response("307"));
            assert_eq!((d.table.len(), d.table.size()), (4, 222));
        }
    }

    #[test]
    fn literal_forms_and_never_indexed_are_told_apart() {
        let mut d = Decoder::new(4096);
        let mut got = Vec::new();
        // C.2.2 (without indexing, indexed name) then C.2.3 (never indexed, new name).
        d.decode(
            &hex("040c 2f73 616d 706c 652f 7061 7468 1008 7061 7373 776f 7264 0673 6563 7265 74"),
            |f| got.push(f),
        )
        .unwrap();
        assert_eq!(got[0].name, ":path");
        assert_eq!(got[0].value, "/sample/path");
        assert!(!got[0].sensitive);
        assert_eq!(got[1].name, "password");
        assert_eq!(got[1].value, "secret");
        assert!(got[1].sensitive);
        assert_eq!(d.table.len(), 0);
    }

    #[test]
    fn broken_blocks_are_refused() {
        let err = |limit, block: &str| Decoder::new(limit).decode(&hex(block), |_| ()).unwrap_err();
        assert_eq!(err(4096, "be"), DecodeError::BadIndex(62));
        assert_eq!(err(4096, "80"), DecodeError::BadIndex(0));
        assert_eq!(err(4096, "400a 6375"), DecodeError::Truncated);
        assert_eq!(err(4096, "ff"), DecodeError::Truncated);
        assert_eq!(err(4096, "ff80 8080 8001"), DecodeError::IntegerTooLarge);
        assert_eq!(
            err(4096, "3fe2 1f"),
            DecodeError::SizeAboveLimit(4097, 4096)
        );
        assert_eq!(err(4096, "82 20"), DecodeError::LateSizeUpdate);
        assert_eq!(
            err(4096, "0081 ff81 ff"),
            DecodeError::Huffman(HuffmanError::Padding)
        );
        // A size update of 0, then 4096: allowed at the start.
        Decoder::new(4096)
            .decode(&hex("20 3fe1 1f 82"), |_| ())
            .unwrap();
    }

    #[test]
    fn a_lowered_limit_needs_an_update_in_the_next_block() {
        let mut d = Decoder::new(4096);
        d.decode(&hex("4003 6162 6301 31"), |_| ()).unwrap();
        d.set_limit(0);
        assert_eq!(
            d.decode(&hex("82"), |_| ()),
            Err(DecodeError::MissingSizeUpdate(0))
        );
        let mut d = Decoder::new(4096);
        d.decode(&hex("4003 6162 6301 31"), |_| ()).unwrap();
        d.set_limit(0);
        d.decode(&hex("20 82"), |_| ()).unwrap();
        assert_eq!(d.table.len(), 0);
        assert_eq!(d.decode(&hex("be"), |_| ()), Err(DecodeError::BadIndex(62)));
    }
}
