//! gRPC's own request rules, pure: the `grpc-timeout` header read as the request's deadline
//! (gRPC over HTTP/2: `TimeoutValue TimeoutUnit`, at most 8 digits, units `H M S m u n`).
//! The answers to gRPC requests are `error_page::grpc_answer`. No I/O here.

use std::time::Duration;

/// `grpc-timeout`: the time the client gives the call, or `None` when the header is absent or
/// malformed (the call then has no deadline of its own, as the gRPC spec says for a bad value).
pub fn timeout(value: Option<&[u8]>) -> Option<Duration> {
    let v = value?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b"H" => Duration::from_secs(n.saturating_mul(3600)),
        b"M" => Duration::from_secs(n.saturating_mul(60)),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values() {
        let t = |v: &str| timeout(Some(v.as_bytes()));
        assert_eq!(t("300m"), Some(Duration::from_millis(300)));
        assert_eq!(t("5S"), Some(Duration::from_secs(5)));
        assert_eq!(t("2M"), Some(Duration::from_secs(120)));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("99999999n"), Some(Duration::from_nanos(99_999_999)));
        assert_eq!(t("10u"), Some(Duration::from_micros(10)));
        for bad in ["", "m", "123456789m", "5s", "-1S", "1.5S", "5"] {
            assert_eq!(t(bad), None, "{bad}");
        }
        assert_eq!(timeout(None), None);
    }
}
