//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B): encoding a string, and decoding one with
//! the code's padding rules checked. The code is canonical (codes of one length are
//! consecutive, in symbol order), so decoding needs no tree: a byte-wide table for the codes of
//! up to 8 bits, and per length the first code and where its symbols start. Nothing here
//! allocates beyond its output.

/// Why a Huffman-coded string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HuffmanError {
    /// The string holds the end-of-string symbol, which RFC 7541 §5.2 forbids.
    #[error("the string holds the end-of-string symbol")]
    Eos,
    /// The last bits are more than 7, or not the most significant bits of the end-of-string
    /// symbol (all ones).
    #[error("the string's padding is not at most 7 one bits")]
    Padding,
}

/// The end-of-string symbol.
const EOS: usize = 256;

/// (code, bits) of each symbol; 256 is the end-of-string symbol (RFC 7541 Appendix B).
pub(super) const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

/// The symbols in code order (by length, then symbol), and per length (index 0..=30) the first
/// code of that length, how many codes have it, and where their symbols start in `SORTED`.
struct Canonical {
    sorted: [u16; 257],
    first: [u32; 31],
    count: [u32; 31],
    start: [u16; 31],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        sorted: [0; 257],
        first: [0; 31],
        count: [0; 31],
        start: [0; 31],
    };
    let mut at = 0;
    let mut len = 0;
    while len <= 30 {
        c.start[len] = at as u16;
        let mut sym = 0;
        while sym < 257 {
            if CODES[sym].1 as usize == len {
                if c.count[len] == 0 {
                    c.first[len] = CODES[sym].0;
                }
                c.count[len] += 1;
                c.sorted[at] = sym as u16;
                at += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    c
}

static CANONICAL: Canonical = canonical();

/// For each value of the next 8 bits: the symbol whose code (of at most 8 bits) starts them,
/// and its length; length 0 when the code is longer.
static SHORT: [(u8, u8); 256] = short();

const fn short() -> [(u8, u8); 256] {
    let mut table = [(0u8, 0u8); 256];
    let mut sym = 0;
    while sym < 256 {
        let (code, len) = CODES[sym];
        if len <= 8 {
            let shift = 8 - len as u32;
            let lo = (code << shift) as usize;
            let mut b = lo;
            while b < lo + (1 << shift) {
                table[b] = (sym as u8, len);
                b += 1;
            }
        }
        sym += 1;
    }
    table
}

/// Appends `src` Huffman-coded to `dst`, padded with one bits.
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    dst.reserve(encoded_len(src));
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            dst.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        dst.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
}

/// How many bytes `src` takes Huffman-coded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Appends the Huffman-coded `src`, decoded, to `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HuffmanError> {
    // Most symbols take 5 to 8 bits: the decoded string is up to 8/5 of the coded one.
    dst.reserve(src.len() + src.len() / 2);
    let c = &CANONICAL;
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut rest = src.iter();
    loop {
        while bits <= 48 {
            match rest.next() {
                Some(&b) => {
                    acc = (acc << 8) | u64::from(b);
                    bits += 8;
                }
                None => break,
            }
        }
        if bits >= 8 {
            let (sym, len) = SHORT[(acc >> (bits - 8)) as usize & 0xff];
            if len != 0 {
                dst.push(sym);
                bits -= u32::from(len);
                acc &= (1u64 << bits) - 1;
                continue;
            }
        }
        // A longer code, or the last few bits: the first length whose codes hold them.
        let mut found = None;
        let mut len = 5;
        while len <= 30 && len <= bits as usize {
            let code = (acc >> (bits - len as u32)) as u32;
            if c.count[len] != 0 && code >= c.first[len] && code - c.first[len] < c.count[len] {
                found = Some((
                    c.sorted[c.start[len] as usize + (code - c.first[len]) as usize],
                    len,
                ));
                break;
            }
            len += 1;
        }
        let Some((sym, len)) = found else { break };
        if sym as usize == EOS {
            return Err(HuffmanError::Eos);
        }
        dst.push(sym as u8);
        bits -= len as u32;
        acc &= (1u64 << bits) - 1;
    }
    // Every 30 bits start with some code, so only the end is left: padding of at most 7 bits,
    // all ones (the start of the end-of-string code).
    if rest.next().is_some() || bits > 7 || acc != (1u64 << bits) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(src: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    /// RFC 7541 C.4.1: "www.example.com" coded.
    #[test]
    fn decodes_the_rfc_examples() {
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(decoded(&www).unwrap(), b"www.example.com");
        let no_cache = [0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf];
        assert_eq!(decoded(&no_cache).unwrap(), b"no-cache");
        let mut out = Vec::new();
        encode(b"www.example.com", &mut out);
        assert_eq!(out, www);
        assert_eq!(encoded_len(b"no-cache"), no_cache.len());
    }

    #[test]
    fn every_byte_goes_and_comes_back() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for len in 0..all.len() {
            let mut coded = Vec::new();
            encode(&all[..len], &mut coded);
            assert_eq!(coded.len(), encoded_len(&all[..len]));
            assert_eq!(decoded(&coded).unwrap(), &all[..len], "{len}");
        }
    }

    #[test]
    fn bad_padding_and_the_end_of_string_symbol_are_refused() {
        // "a" is 00011 (5 bits): padding 000 is not ones.
        assert_eq!(decoded(&[0b0001_1000]), Err(HuffmanError::Padding));
        assert_eq!(decoded(&[0b0001_1111]).unwrap(), b"a");
        // Eight bits of padding (a whole byte of ones) is too long.
        assert_eq!(decoded(&[0b0001_1111, 0xff]), Err(HuffmanError::Padding));
        assert_eq!(decoded(&[0xff]), Err(HuffmanError::Padding));
        // The end-of-string symbol itself: 30 one bits, then padding.
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xff]), Err(HuffmanError::Eos));
        assert_eq!(decoded(&[]).unwrap(), b"");
    }
}
