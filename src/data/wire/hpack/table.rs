//! HPACK's two tables (RFC 7541 §2.3): the static one, fixed by the RFC, and a decoder's
//! dynamic one, which the peer's encoder fills and which evicts its oldest entries to stay
//! within the size the peer set. An entry's size is its name and value plus 32 bytes (§4.1).

use std::collections::VecDeque;

use bytes::Bytes;

/// RFC 7541 Appendix A: the static table, index 1 first.
pub(super) static STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static entries named `name`: the first index and how many (they are consecutive).
pub(super) fn static_name(name: &[u8]) -> Option<(usize, usize)> {
    Some(match name {
        b":authority" => (1, 1),
        b":method" => (2, 2),
        b":path" => (4, 2),
        b":scheme" => (6, 2),
        b":status" => (8, 7),
        b"accept-charset" => (15, 1),
        b"accept-encoding" => (16, 1),
        b"accept-language" => (17, 1),
        b"accept-ranges" => (18, 1),
        b"accept" => (19, 1),
        b"access-control-allow-origin" => (20, 1),
        b"age" => (21, 1),
        b"allow" => (22, 1),
        b"authorization" => (23, 1),
        b"cache-control" => (24, 1),
        b"content-disposition" => (25, 1),
        b"content-encoding" => (26, 1),
        b"content-language" => (27, 1),
        b"content-length" => (28, 1),
        b"content-location" => (29, 1),
        b"content-range" => (30, 1),
        b"content-type" => (31, 1),
        b"cookie" => (32, 1),
        b"date" => (33, 1),
        b"etag" => (34, 1),
        b"expect" => (35, 1),
        b"expires" => (36, 1),
        b"from" => (37, 1),
        b"host" => (38, 1),
        b"if-match" => (39, 1),
        b"if-modified-since" => (40, 1),
        b"if-none-match" => (41, 1),
        b"if-range" => (42, 1),
        b"if-unmodified-since" => (43, 1),
        b"last-modified" => (44, 1),
        b"link" => (45, 1),
        b"location" => (46, 1),
        b"max-forwards" => (47, 1),
        b"proxy-authenticate" => (48, 1),
        b"proxy-authorization" => (49, 1),
        b"range" => (50, 1),
        b"referer" => (51, 1),
        b"refresh" => (52, 1),
        b"retry-after" => (53, 1),
        b"server" => (54, 1),
        b"set-cookie" => (55, 1),
        b"strict-transport-security" => (56, 1),
        b"transfer-encoding" => (57, 1),
        b"user-agent" => (58, 1),
        b"vary" => (59, 1),
        b"via" => (60, 1),
        b"www-authenticate" => (61, 1),
        _ => return None,
    })
}

/// What an entry costs beyond its name and value (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;

/// A decoder's dynamic table: the newest entry first (index 62 in the joint index space).
#[derive(Debug, Default)]
pub(super) struct DynamicTable {
    entries: VecDeque<(Bytes, Bytes)>,
    size: usize,
    max: usize,
}

impl DynamicTable {
    pub(super) fn new(max: usize) -> DynamicTable {
        DynamicTable {
            max,
            ..DynamicTable::default()
        }
    }

    /// The entry at `index` of the joint space (1 to 61 static, then dynamic, newest first).
    pub(super) fn get(&self, index: usize) -> Option<(Bytes, Bytes)> {
        match index {
            0 => None,
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Some((
                    Bytes::from_static(n.as_bytes()),
                    Bytes::from_static(v.as_bytes()),
                ))
            }
            _ => self.entries.get(index - 62).cloned(),
        }
    }

    /// Adds an entry, evicting the oldest until it fits; one larger than the table empties it
    /// and is not kept (§4.4). The name and value are copied, so that an entry does not keep a
    /// whole frame's buffer alive.
    pub(super) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.evict_to(self.max.saturating_sub(size));
        if size <= self.max {
            self.size += size;
            self.entries
                .push_front((Bytes::copy_from_slice(name), Bytes::copy_from_slice(value)));
        }
    }

    /// A new maximum size, evicting what no longer fits (§4.3).
    pub(super) fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            match self.entries.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + ENTRY_OVERHEAD,
                None => self.size = 0,
            }
        }
    }

    #[cfg(test)]
    pub(super) fn size(&self) -> usize {
        self.size
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_static_name_is_found_where_it_is() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let (first, count) = static_name(name.as_bytes()).unwrap();
            assert!((first..first + count).contains(&(i + 1)), "{name}");
            assert!(
                STATIC[first - 1..first - 1 + count]
                    .iter()
                    .all(|(n, _)| n == name)
            );
        }
        assert_eq!(static_name(b"x-forwarded-for"), None);
        assert_eq!(static_name(b":status"), Some((8, 7)));
    }

    #[test]
    fn the_oldest_entries_go_first_and_an_oversized_one_empties_the_table() {
        let mut t = DynamicTable::new(100);
        t.insert(b"aaaa", b"1111"); // 40
        t.insert(b"bbbb", b"2222"); // 80
        assert_eq!((t.len(), t.size()), (2, 80));
        assert_eq!(t.get(62).unwrap().0, "bbbb");
        t.insert(b"cccc", b"3333"); // evicts aaaa
        assert_eq!((t.len(), t.size()), (2, 80));
        assert_eq!(t.get(63).unwrap().0, "bbbb");
        assert_eq!(t.get(64), None);
        t.set_max(50);
        assert_eq!((t.len(), t.size()), (1, 40));
        t.insert(&[b'x'; 60], b"");
        assert_eq!((t.len(), t.size()), (0, 0));
        assert_eq!(
            t.get(2).unwrap(),
            (Bytes::from(":method"), Bytes::from("GET"))
        );
        assert_eq!(t.get(0), None);
    }
}
