//! Encoding a header block as HAProxy does: a field found whole in the static table is sent as
//! its index, any other as a literal that the peer does not index, its name indexed when the
//! static table has it and its value sent as is. Nothing is added to the peer's dynamic table,
//! so the encoder keeps no state but whether it still owes the peer a table size update, and
//! no Huffman coding is spent: on switchyard's measurement a table-free encoder with raw
//! literals did an HTTP/2 relay's work in the fewest instructions (docs/performance-notebook.md).

use super::table::{STATIC, static_name};

/// One direction's encoder.
#[derive(Debug)]
pub struct Encoder {
    /// The next block starts with "table size 0": the peer's decoder then keeps no entries
    /// of ours, whatever size its settings allow.
    owes_size_update: bool,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            owes_size_update: true,
        }
    }

    /// The peer sent a new `SETTINGS_HEADER_TABLE_SIZE`: RFC 7541 §4.2 wants the next block to
    /// start with a size update within it.
    pub fn peer_table_size_changed(&mut self) {
        self.owes_size_update = true;
    }

    /// The "table size 0" update the next block must start with, once, when one is owed: for
    /// a block encoded field by field (`field`) apart from the connection.
    pub fn size_update(&mut self) -> Option<u8> {
        std::mem::take(&mut self.owes_size_update).then_some(0x20)
    }

    /// Appends the block for `fields` (lower-case names, pseudo-fields first), each with
    /// whether it is sensitive (sent "never indexed", §6.2.3).
    pub fn encode<'f>(
        &mut self,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8], bool)>,
        dst: &mut Vec<u8>,
    ) {
        if let Some(update) = self.size_update() {
            dst.push(update);
        }
        for (name, value, sensitive) in fields {
            field(name, value, sensitive, dst);
        }
    }
}

/// Appends one field (a lower-case name), sensitive ones "never indexed" (§6.2.3), as `encode`
/// does; the block's size update, if owed, is `Encoder::size_update`'s.
pub fn field(name: &[u8], value: &[u8], sensitive: bool, dst: &mut Vec<u8>) {
    let found = static_name(name);
    if let (Some((first, count)), false) = (found, sensitive) {
        let whole = (first..first + count).find(|&i| STATIC[i - 1].1.as_bytes() == value);
        if let Some(index) = whole {
            int(index, 7, 0x80, dst);
            return;
        }
    }
    name_of_literal(name, found.map(|(first, _)| first), sensitive, dst);
    string(value, dst);
}

/// The start of a literal field the peer does not index (never indexes when `sensitive`):
/// its name as the static table's entry `index`, or as a string.
fn name_of_literal(name: &[u8], index: Option<usize>, sensitive: bool, dst: &mut Vec<u8>) {
    let flags = if sensitive { 0x10 } else { 0x00 };
    match index {
        Some(index) => int(index, 4, flags, dst),
        None => {
            dst.push(flags);
            string(name, dst);
        }
    }
}

/// Appends one field named by the static table's entry `index` (RFC 7541 Appendix A), its
/// value as a literal the peer does not index: what `field` sends for such a name and a value
/// the table lacks, without looking the name up.
pub fn field_named(index: usize, value: &[u8], dst: &mut Vec<u8>) {
    int(index, 4, 0, dst);
    string(value, dst);
}

/// Appends one field (a lower-case name, not sensitive) whose value `value` writes at the end
/// of `dst`: the value is written in place, not copied, its length put before it after.
pub fn field_written(name: &[u8], dst: &mut Vec<u8>, value: impl FnOnce(&mut Vec<u8>)) {
    name_of_literal(name, static_name(name).map(|(first, _)| first), false, dst);
    let at = dst.len();
    dst.push(0);
    value(dst);
    let len = dst.len() - at - 1;
    if len < 0x7f {
        dst[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(5);
        int(len, 7, 0, &mut prefix);
        dst.splice(at..=at, prefix);
    }
}

/// `value` with a `prefix`-bit prefix under `flags` (§5.1).
pub(super) fn int(value: usize, prefix: u8, flags: u8, dst: &mut Vec<u8>) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        dst.push(flags | value as u8);
        return;
    }
    dst.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        dst.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    dst.push(rest as u8);
}

/// A string sent as is (§5.2, H = 0).
fn string(s: &[u8], dst: &mut Vec<u8>) {
    int(s.len(), 7, 0, dst);
    dst.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::decoder::{Decoder, int as read_int};
    use super::*;

    fn block(e: &mut Encoder, fields: &[(&str, &str, bool)]) -> Vec<u8> {
        let mut out = Vec::new();
        e.encode(
            fields
                .iter()
                .map(|(n, v, s)| (n.as_bytes(), v.as_bytes(), *s)),
            &mut out,
        );
        out
    }

    #[test]
    fn encodes_as_the_rfc_examples_do() {
        let mut e = Encoder::new();
        // The first block says the table is empty.
        assert_eq!(block(&mut e, &[(":method", "GET", false)]), [0x20, 0x82]);
        // C.2.2: a static name, a new value, not indexed.
        let mut want = vec![0x04, 0x0c];
        want.extend_from_slice(b"/sample/path");
        assert_eq!(block(&mut e, &[(":path", "/sample/path", false)]), want);
        // C.2.3: never indexed, a new name.
        let mut want = vec![0x10, 0x08];
        want.extend_from_slice(b"password\x06secret");
        assert_eq!(block(&mut e, &[("password", "secret", true)]), want);
        // A sensitive field is never sent as an index, even when the static table has it.
        assert_eq!(
            block(&mut e, &[(":method", "GET", true)]),
            [0x12, 0x03, b'G', b'E', b'T']
        );
        e.peer_table_size_changed();
        assert_eq!(block(&mut e, &[(":status", "200", false)]), [0x20, 0x88]);
    }

    #[test]
    fn integers_take_the_rfc_forms() {
        // C.1.1-3: 10 and 1337 on 5 bits, 42 on 8.
        let mut out = Vec::new();
        int(10, 5, 0, &mut out);
        int(1337, 5, 0, &mut out);
        int(42, 8, 0, &mut out);
        assert_eq!(out, [0x0a, 0x1f, 0x9a, 0x0a, 0x2a]);
        for v in [
            0,
            30,
            31,
            127,
            128,
            255,
            16_383,
            16_384,
            1 << 20,
            (1 << 28) - 1,
        ] {
            for prefix in [4, 5, 6, 7] {
                let mut out = Vec::new();
                int(v, prefix, 0, &mut out);
                let mut at = 0;
                assert_eq!(read_int(&out, &mut at, prefix).unwrap(), v);
                assert_eq!(at, out.len());
            }
        }
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_fields() {
        let fields = [
            (":status", "200", false),
            (":status", "201", false),
            ("content-type", "application/grpc", false),
            ("accept-encoding", "gzip, deflate", false),
            ("x-long", &"v".repeat(300)[..], false),
            ("authorization", "Bearer t", true),
            ("grpc-status", "0", false),
            ("empty", "", false),
        ];
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        for _ in 0..2 {
            let out = block(&mut e, &fields);
            let mut got = Vec::new();
            d.decode(&Bytes::from(out), |f| got.push(f)).unwrap();
            assert_eq!(got.len(), fields.len());
            for (f, (n, v, s)) in got.iter().zip(fields) {
                assert_eq!(
                    (&f.name[..], &f.value[..], f.sensitive),
                    (n.as_bytes(), v.as_bytes(), s)
                );
            }
        }
    }

    #[test]
    fn a_value_written_in_place_decodes_as_one_copied() {
        // Lengths either side of the one-byte prefix's limit (126, 127), and a long one.
        for len in [1, 5, 126, 127, 128, 300, 20_000] {
            let value = "x".repeat(len);
            let mut written = vec![0x20];
            field_written(b"x-trace", &mut written, |out| {
                out.extend_from_slice(value.as_bytes())
            });
            field_written(b"cookie", &mut written, |out| {
                out.extend_from_slice(value.as_bytes())
            });
            let mut copied = vec![0x20];
            field(b"x-trace", value.as_bytes(), false, &mut copied);
            field(b"cookie", value.as_bytes(), false, &mut copied);
            assert_eq!(written, copied, "{len}");
            let mut got = Vec::new();
            Decoder::new(4096)
                .decode(&Bytes::from(written), |f| got.push(f))
                .unwrap();
            assert_eq!(got.len(), 2);
            assert_eq!(&got[1].name[..], b"cookie");
            assert_eq!(&got[1].value[..], value.as_bytes());
        }
    }
}
