//! Connection fields and message lengths, as RFC 9110 and RFC 9113 define them.

/// Whether `name` (any case) names a field that belongs to one connection, not to the message:
/// the connection options and framing of RFC 9110 §7.6.1 and the fields RFC 9113 §8.2.2
/// forbids in HTTP/2 (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`,
/// `upgrade`, `te`), and `http2-settings`, which only an HTTP/1.1 upgrade to h2c carries.
/// None is forwarded as it came, whatever the protocols on either side; each codec states
/// its own framing instead. The fields a `Connection` value names are such fields too
/// (`named_by_connection`).
pub fn is_connection_field(name: &[u8]) -> bool {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    match name.len() {
        2 => is(b"te"),
        7 => is(b"upgrade"),
        10 => is(b"connection") || is(b"keep-alive"),
        14 => is(b"http2-settings"),
        16 => is(b"proxy-connection"),
        17 => is(b"transfer-encoding"),
        _ => false,
    }
}

/// The options a `Connection` field value lists (comma-separated tokens, blanks left out).
pub fn connection_options(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Whether `name` is one of the options of the `Connection` values `connection` (so a field
/// of the connection, not forwarded: RFC 9110 §7.6.1). `close` and `keep-alive` name no field
/// a message carries, but are compared as any other option.
pub fn named_by_connection<'v>(
    name: &[u8],
    mut connection: impl Iterator<Item = &'v [u8]>,
) -> bool {
    connection.any(|v| connection_options(v).any(|o| o.eq_ignore_ascii_case(name)))
}

/// A `content-length` value (RFC 9110 §8.6): decimal digits only, optionally surrounded by
/// blanks, at most 18 digits (any such number fits a `u64`). No sign, no list, nothing else:
/// a value that is not exactly one length is `None`, and each codec refuses the message.
pub fn parse_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Whether a raw HTTP/1 request header (from its request line on) has a `Content-Length`
/// line, whatever its case or line ending.
pub fn names_content_length(raw_header: &[u8]) -> bool {
    const NAME: &[u8] = b"\ncontent-length";
    raw_header
        .windows(NAME.len())
        .any(|w| w.eq_ignore_ascii_case(NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_fields_in_any_case_and_nothing_else() {
        for name in [
            "connection",
            "Keep-Alive",
            "PROXY-CONNECTION",
            "transfer-encoding",
            "Upgrade",
            "te",
            "HTTP2-Settings",
        ] {
            assert!(is_connection_field(name.as_bytes()), "{name}");
        }
        for name in [
            "content-length",
            "trailer",
            "host",
            "tea",
            "connections",
            "x-connection",
            "",
        ] {
            assert!(!is_connection_field(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn fields_named_by_connection_are_connection_fields() {
        let values: [&[u8]; 2] = [b"close, X-Trace ,", b" keep-alive,x-hop"];
        for name in ["x-trace", "X-HOP", "close"] {
            assert!(
                named_by_connection(name.as_bytes(), values.iter().copied()),
                "{name}"
            );
        }
        for name in ["x-tracer", "trace", ""] {
            assert!(
                !named_by_connection(name.as_bytes(), values.iter().copied()),
                "{name}"
            );
        }
        assert!(!named_by_connection(b"x", std::iter::empty()));
    }

    #[test]
    fn a_length_is_digits_only() {
        assert_eq!(parse_length(b" 42 "), Some(42));
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(
            parse_length(b"999999999999999999"),
            Some(999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"+5",
            b"-1",
            b"4 2",
            b"42, 42",
            b"0x10",
            b"1e3",
            b"9999999999999999999",
        ] {
            assert_eq!(
                parse_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_content_length_line_is_found_in_any_case_and_line_ending() {
        assert!(names_content_length(
            b"POST / HTTP/1.1\r\nCONTENT-length: 4\r\n"
        ));
        assert!(names_content_length(
            b"POST / HTTP/1.1\nContent-Length: 4\n"
        ));
        assert!(!names_content_length(b"POST / HTTP/1.1\r\nHost: a\r\n"));
        assert!(!names_content_length(b"POST /content-length HTTP/1.1\r\n"));
    }
}
