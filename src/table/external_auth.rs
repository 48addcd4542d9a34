//! ingress-nginx's external authentication (`auth-url` and its companions) as the table holds
//! it: where each request's subrequest goes and what it asks, where a client that must sign in
//! is sent, and which fields of an allowing answer reach the backend. Data only: translate
//! reads the annotations (`AuthUrl::parse` decides which URLs can be served), the decision
//! core writes the subrequest's fields and reads its answer (`decide::external_auth`), the
//! engine carries the exchange (`data::external_auth`). No Kubernetes, Pingora or tokio.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};

use crate::table::hash_key::HashKey;
use crate::table::location::Location;
use crate::table::shared::{EntryId, Shared};

/// One route's external authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExternalAuth {
    /// `auth-url` as written.
    pub url: Box<str>,
    /// Where the subrequest goes.
    pub target: AuthTarget,
    /// Its `Host`: the URL's authority.
    pub host: Box<str>,
    /// Its target: the URL's path and query.
    pub path: Box<str>,
    /// Its method (`auth-method`; `GET`).
    pub method: Box<str>,
    /// Where a client the service answers `401` is redirected (`auth-signin`, with the
    /// redirect parameter added as ingress-nginx adds it); `None`: the `401` is passed on.
    pub signin: Option<Location>,
    /// Fields of an allowing answer set on the request to the backend (`auth-response-headers`,
    /// lower case). One the answer lacks is removed from the request: a client never supplies
    /// what the service vouches for.
    pub response_headers: Box<[Box<str>]>,
    /// `X-Auth-Request-Redirect` of the subrequest (`auth-request-redirect`); `None`: the
    /// request's path and query.
    pub request_redirect: Option<Box<str>>,
    /// The answer's `Set-Cookie` fields go to the client whatever the backend's status
    /// (`auth-always-set-cookie`); else only with a success or redirect status.
    pub always_set_cookie: bool,
    /// Answers kept and given again to requests of the same key (`auth-cache-key`,
    /// `auth-cache-duration`); `None`: every request is asked.
    pub cache: Option<AuthCache>,
}

/// What the authentication service answered: its status and header fields (names lower
/// case), as the engine read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthAnswer {
    pub status: u16,
    pub fields: Vec<(Box<str>, Box<[u8]>)>,
}

/// How long answers of which statuses are kept (`None`: any status), first match wins.
pub type CacheDurations = Box<[(Option<Box<[u16]>>, Duration)]>;

/// The answers kept, by the SHA-1 digest of the filled-in key, with when they expire.
pub type KeptAnswers = HashMap<[u8; 20], (Instant, Arc<AuthAnswer>)>;

/// ingress-nginx's cache of authentication answers (nginx's `proxy_cache` of the auth
/// location): an answer of a status `durations` names is given again, for that long, to the
/// requests whose key (`auth-cache-key` filled in from the request) is the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthCache {
    pub key: HashKey,
    /// How long answers of which statuses are kept (`None`: any status), first match wins.
    pub durations: CacheDurations,
    /// The answers kept, by the SHA-1 digest of the filled-in key, with when they expire. Not
    /// part of equality; a rebuild starts it empty.
    pub kept: Shared<Mutex<KeptAnswers>>,
}

/// The most answers one route's cache keeps; past it, the expired go, and if none has, all.
pub const CACHE_MAX: usize = 4096;

impl AuthCache {
    /// ingress-nginx's default `auth-cache-duration`: `200 202 401 5m`.
    pub fn default_durations() -> CacheDurations {
        Box::new([(
            Some(Box::from([200, 202, 401].as_slice())),
            Duration::from_secs(300),
        )])
    }

    /// How long an answer of `status` is kept (`None`: not kept).
    pub fn duration(&self, status: u16) -> Option<Duration> {
        self.durations
            .iter()
            .find(|(codes, _)| codes.as_ref().is_none_or(|c| c.contains(&status)))
            .map(|(_, d)| *d)
    }
}

impl Serialize for AuthCache {
    /// The key as written and the durations; never a kept answer.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("AuthCache", 2)?;
        st.serialize_field("key", &self.key)?;
        let durations: Vec<String> = self
            .durations
            .iter()
            .map(|(codes, d)| {
                let codes = codes.as_ref().map_or_else(
                    || "any".to_string(),
                    |c| c.iter().map(u16::to_string).collect::<Vec<_>>().join(" "),
                );
                format!("{codes} {}s", d.as_secs())
            })
            .collect();
        st.serialize_field("durations", &durations)?;
        st.end()
    }
}

/// Where a subrequest goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthTarget {
    /// An endpoint of this entry (the Service the URL names), picked by its algorithm.
    Entry(EntryId),
    /// The address the URL writes.
    Address(SocketAddr),
}

/// An `auth-url` switchyard can carry out: `http://` to a Service by its cluster name, or to
/// an IP address. Names are never resolved on the request path, so other hosts are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthUrl {
    pub host: Box<str>,
    pub path: Box<str>,
    pub to: AuthHost,
}

/// The host of an [`AuthUrl`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthHost {
    /// `<service>.<namespace>[.svc[.<cluster domain>]]`, on this port.
    Service {
        namespace: Box<str>,
        name: Box<str>,
        port: u16,
    },
    Address(SocketAddr),
}

impl AuthUrl {
    /// Reads `auth-url`; the error says why it cannot be carried out.
    pub fn parse(v: &str) -> Result<AuthUrl, &'static str> {
        let v = v.trim();
        if v.contains('$') {
            return Err(
                "it names nginx variables, which switchyard does not fill in for \
                        auth-url; write the authentication Service's cluster name",
            );
        }
        let uri: http::Uri = v.parse().map_err(|_| "it is not a URL")?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(
                    "https to the authentication service is not carried out yet \
                            (http:// to its Service is)",
                );
            }
            _ => return Err("it is not an http:// URL"),
        }
        let authority = uri.authority().ok_or("it names no host")?;
        let port = authority.port_u16().unwrap_or(80);
        let host = authority.host();
        let path = uri.path_and_query().map_or("/", |pq| pq.as_str());
        let path = if path.is_empty() { "/" } else { path };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let to = if let Ok(ip) = bare.parse::<IpAddr>() {
            AuthHost::Address(SocketAddr::new(ip, port))
        } else {
            let lower = host.to_ascii_lowercase();
            let labels: Vec<&str> = lower.split('.').collect();
            let service = match labels.as_slice() {
                [name, namespace] => Some((*name, *namespace)),
                [name, namespace, "svc", ..] => Some((*name, *namespace)),
                _ => None,
            };
            let Some((name, namespace)) = service.filter(|(n, ns)| is_label(n) && is_label(ns))
            else {
                return Err("its host is neither a Service's cluster name \
                            (<name>.<namespace>.svc) nor an IP address, and switchyard \
                            resolves no names on the request path");
            };
            AuthHost::Service {
                namespace: namespace.into(),
                name: name.into(),
                port,
            }
        };
        Ok(AuthUrl {
            host: authority.as_str().into(),
            path: path.into(),
            to,
        })
    }
}

/// A DNS label as Kubernetes names Services and namespaces (RFC 1123).
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `auth-signin` with ingress-nginx's redirect parameter (`auth-signin-redirect-param`, `rd`)
/// added unless the URL already has it: `<signin>?rd=$scheme://$http_host$escaped_request_uri`
/// (`&` when the URL has a query).
pub fn signin_with_redirect(signin: &str, param: &str) -> String {
    let signin = signin.trim();
    let param = match param.trim() {
        "" => "rd",
        p => p,
    };
    let query = signin.split_once('?').map(|(_, q)| q);
    if let Some(q) = query {
        let has = q.split('&').any(|kv| {
            kv.split_once('=')
                .is_some_and(|(k, v)| k == param && !v.is_empty())
        });
        if has {
            return signin.to_string();
        }
    }
    let sep = match query {
        Some(q) if !q.is_empty() => "&",
        Some(_) => "",
        None => "?",
    };
    format!("{signin}{sep}{param}=$scheme://$http_host$escaped_request_uri")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn services_and_addresses_are_served_other_urls_say_why_not() {
        let svc = AuthUrl::parse("http://oauth2-proxy.auth.svc.cluster.local/oauth2/auth").unwrap();
        assert_eq!(
            svc.to,
            AuthHost::Service {
                namespace: "auth".into(),
                name: "oauth2-proxy".into(),
                port: 80
            }
        );
        assert_eq!(&*svc.host, "oauth2-proxy.auth.svc.cluster.local");
        assert_eq!(&*svc.path, "/oauth2/auth");
        let short = AuthUrl::parse("http://authn.team-a:4180/check?x=1").unwrap();
        assert_eq!(
            short.to,
            AuthHost::Service {
                namespace: "team-a".into(),
                name: "authn".into(),
                port: 4180
            }
        );
        assert_eq!(&*short.path, "/check?x=1");
        let ip = AuthUrl::parse("http://10.0.0.7:9000").unwrap();
        assert_eq!(ip.to, AuthHost::Address("10.0.0.7:9000".parse().unwrap()));
        assert_eq!(&*ip.path, "/");
        let v6 = AuthUrl::parse("http://[::1]:9000/a").unwrap();
        assert_eq!(v6.to, AuthHost::Address("[::1]:9000".parse().unwrap()));
        for bad in [
            "https://$host/oauth2/auth",
            "https://auth.svc.ns.svc/x",
            "http://auth.example.com/x",
            "http://auth/x",
            "ftp://10.0.0.1/",
            "not a url",
            "http://Bad_Name.ns.svc/",
        ] {
            assert!(AuthUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_redirect_parameter_is_added_as_ingress_nginx_adds_it() {
        let rd = "$scheme://$http_host$escaped_request_uri";
        assert_eq!(
            signin_with_redirect("https://auth.example.com/start", ""),
            format!("https://auth.example.com/start?rd={rd}")
        );
        assert_eq!(
            signin_with_redirect("https://a.test/start?x=1", "next"),
            format!("https://a.test/start?x=1&next={rd}")
        );
        assert_eq!(
            signin_with_redirect("https://a.test/start?rd=$request_uri", "rd"),
            "https://a.test/start?rd=$request_uri"
        );
    }
}
