//! ingress-nginx's `upstream-hash-by`: the request's parts, named by nginx variables, whose
//! hash picks the endpoint (consistently: the same key goes to the same endpoint while it
//! serves, and adding one moves about 1/N of the keys, `balance`'s rendezvous hashing). Data
//! only: translate parses the template, `decide::hash_key` hashes a request's. No
//! Kubernetes, Pingora or tokio.

use serde::{Serialize, Serializer};

use crate::table::location::{Piece, pieces};

/// A key template as written, split at its variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashKey {
    pub text: Box<str>,
    pub parts: Box<[KeyPart]>,
}

impl Serialize for HashKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A piece of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    Text(Box<str>),
    /// `$remote_addr`, `$binary_remote_addr`: the client's address.
    RemoteAddr,
    /// `$host`: the request's host, lower case, without a port.
    Host,
    /// `$request_uri`: path and query.
    RequestUri,
    /// `$uri`: the path.
    Uri,
    /// `$args`, `$query_string`: the query.
    Args,
    /// `$http_<name>`: a request field (`-` for `_`, lower case).
    Header(Box<str>),
    /// `$cookie_<name>`: a cookie.
    Cookie(Box<str>),
    /// `$arg_<name>`: a query parameter.
    Arg(Box<str>),
}

impl HashKey {
    /// Reads `upstream-hash-by`: text and the variables above (also as `${name}`); any other
    /// variable, or none at all (every request would go to one endpoint), is an error.
    pub fn parse(v: &str) -> Result<HashKey, String> {
        let v = v.trim();
        let mut parts = Vec::new();
        for piece in pieces(v)? {
            let name = match piece {
                Piece::Text(t) => {
                    parts.push(KeyPart::Text(t.into()));
                    continue;
                }
                Piece::Var(name) => name,
            };
            let part = match name {
                "remote_addr" | "binary_remote_addr" => KeyPart::RemoteAddr,
                "host" => KeyPart::Host,
                "request_uri" => KeyPart::RequestUri,
                "uri" => KeyPart::Uri,
                "args" | "query_string" => KeyPart::Args,
                n => match (
                    n.strip_prefix("http_"),
                    n.strip_prefix("cookie_"),
                    n.strip_prefix("arg_"),
                ) {
                    (Some(h), _, _) if !h.is_empty() => {
                        KeyPart::Header(h.replace('_', "-").to_ascii_lowercase().into())
                    }
                    (_, Some(c), _) if !c.is_empty() => KeyPart::Cookie(c.into()),
                    (_, _, Some(a)) if !a.is_empty() => KeyPart::Arg(a.into()),
                    _ => {
                        return Err(format!(
                            "names ${n}, which switchyard does not fill in (it fills in \
                             $remote_addr, $host, $request_uri, $uri, $args, $http_NAME, \
                             $cookie_NAME, $arg_NAME)"
                        ));
                    }
                },
            };
            parts.push(part);
        }
        if !parts.iter().any(|p| !matches!(p, KeyPart::Text(_))) {
            return Err("names no variable: every request would go to one endpoint".into());
        }
        Ok(HashKey {
            text: v.into(),
            parts: parts.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn nginx_variables_become_parts() {
        let k = HashKey::parse("$host${request_uri}-$http_X_User:$cookie_sid$arg_id").unwrap();
        assert_eq!(
            &*k.parts,
            [
                KeyPart::Host,
                KeyPart::RequestUri,
                KeyPart::Text("-".into()),
                KeyPart::Header("x-user".into()),
                KeyPart::Text(":".into()),
                KeyPart::Cookie("sid".into()),
                KeyPart::Arg("id".into()),
            ]
        );
        for bad in ["constant", "$upstream_addr", "${host", "$http_"] {
            assert!(HashKey::parse(bad).is_err(), "{bad}");
        }
    }
}
