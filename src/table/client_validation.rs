//! Client-certificate validation that Gateways' HTTPS listeners ask for (`spec.tls.frontend`):
//! per listener — its frontend's address and its hostname, as the Gateway routes' listener
//! hosts hold them — the CA bundle client certificates are verified against, and whether a
//! client without a valid one is served anyway (`AllowInsecureFallback`). And the one Ingress
//! hosts ask for on the shared TLS port (ingress-nginx's `auth-tls-*`, per host as nginx's
//! `ssl_verify_client` is per server): there the handshake takes any certificate and records
//! whether it verified, and the request is judged as nginx judges it (`IngressCertAuth`).
//!
//! One lookup serves both sides, so that they cannot disagree: the TLS port asks it with the
//! hello's server name which CA to ask the client for, and the decision core asks it with the
//! request's host what the connection must have proved (a request for a validating listener
//! on a connection that proved nothing, or proved it to another CA, is misdirected). The
//! listener a name belongs to is the one the routes use (`ListenerHosts::owner`: exact name,
//! longest wildcard, then a listener without a hostname). Data and pure lookups only.

use std::net::IpAddr;
use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::table::cert_auth::IngressCertAuth;
use crate::table::gateway::GatewayRoutes;

/// What one listener asks of its clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientValidation {
    /// The CA certificates (PEM) a client certificate must chain to.
    #[serde(serialize_with = "pem_size")]
    pub ca: Arc<[u8]>,
    /// `AllowInsecureFallback`: clients without a certificate, or with one that does not
    /// verify, are served too (the certificate is asked for, and reported only if verified).
    pub insecure_fallback: bool,
    /// The Gateway and listener (`namespace/name/listener`), for the table dump and logs;
    /// an Ingress's `namespace/name`.
    pub origin: Box<str>,
    /// An Ingress host's verification (`None`: a Gateway listener's). Its handshake asks for
    /// a certificate and takes the connection whatever it gets.
    pub ingress: Option<IngressCertAuth>,
}

impl ClientValidation {
    /// Whether a connection whose client certificate verified against `proved` (`None`:
    /// none did) may be served a request for this listener.
    pub fn admits(&self, proved: Option<&[u8]>) -> bool {
        // The same bundle is usually the same allocation (the table's): compared by address
        // first, by content only across tables.
        self.insecure_fallback
            || proved.is_some_and(|ca| std::ptr::eq(ca, &*self.ca) || ca == &*self.ca)
    }
}

fn pem_size<S: Serializer>(ca: &Arc<[u8]>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{} bytes of PEM", ca.len()))
}

/// Where a listener is: its frontend's address (`None`: the shared one), its port when it has
/// one of its own (`None`: the Gateway HTTPS port), and its hostname key (`""` for a listener
/// without a hostname, the name, or a wildcard's suffix with its dot).
pub type ListenerKey = (Option<IpAddr>, Option<u16>, Box<str>);

/// The validating HTTPS listeners of the table, sorted by key, and the Ingress hosts that
/// verify clients on the shared TLS port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClientValidations {
    pub listeners: Vec<(ListenerKey, Arc<ClientValidation>)>,
    pub ingress_hosts: IngressHosts,
}

/// The Ingress hosts that verify clients: exact names, and wildcards by the suffix after
/// their `*.` (one label, as Ingress wildcards match), each sorted, lower case.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IngressHosts {
    pub exact: Vec<(Box<str>, Arc<ClientValidation>)>,
    pub wildcard: Vec<(Box<str>, Arc<ClientValidation>)>,
}

impl IngressHosts {
    /// From `(host, validation)` in any order, a wildcard written `*.suffix`; the first of
    /// two for one host is kept (the caller puts the one that wins first).
    pub fn new(hosts: Vec<(Box<str>, Arc<ClientValidation>)>) -> IngressHosts {
        let (mut exact, mut wildcard) = (Vec::new(), Vec::new());
        for (host, v) in hosts {
            let host = host.to_ascii_lowercase();
            match host.strip_prefix("*.") {
                Some(suffix) => wildcard.push((suffix.into(), v)),
                None => exact.push((host.into_boxed_str(), v)),
            }
        }
        for list in [&mut exact, &mut wildcard] {
            list.sort_by(|a, b| a.0.cmp(&b.0));
            list.dedup_by(|later, first| later.0 == first.0);
        }
        IngressHosts { exact, wildcard }
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// The verification of `host` (a Host field or server name: any case, a trailing dot or
    /// a port allowed): its exact name's, else its wildcard's.
    pub fn of(&self, host: &[u8]) -> Option<&Arc<ClientValidation>> {
        if self.is_empty() {
            return None;
        }
        let host = bare_host(host);
        find_lower(&self.exact, host).or_else(|| {
            let dot = host.iter().position(|&b| b == b'.')?;
            find_lower(&self.wildcard, &host[dot + 1..])
        })
    }
}

/// The validation of `name` (any case) in `list` (sorted, lower case).
fn find_lower<'l>(
    list: &'l [(Box<str>, Arc<ClientValidation>)],
    name: &[u8],
) -> Option<&'l Arc<ClientValidation>> {
    list.binary_search_by(|(k, _)| cmp_lower(k.as_bytes(), name))
        .ok()
        .map(|i| &list[i].1)
}

/// `host` without a port or a trailing dot.
fn bare_host(host: &[u8]) -> &[u8] {
    let host = match host.iter().rposition(|&b| b == b':') {
        // An IPv6 literal's colons are inside brackets.
        Some(i) if !host.contains(&b']') || host[..i].ends_with(b"]") => &host[..i],
        _ => host,
    };
    host.strip_suffix(b".").unwrap_or(host)
}

/// `key` (lower case) against `name` (any case), as `Ord` on lower-case bytes.
fn cmp_lower(key: &[u8], name: &[u8]) -> std::cmp::Ordering {
    key.iter()
        .copied()
        .cmp(name.iter().map(|b| b.to_ascii_lowercase()))
}

impl ClientValidations {
    /// From the listeners in any order; the first of two with one key is kept (the caller
    /// puts the one that wins first).
    pub fn new(mut listeners: Vec<(ListenerKey, Arc<ClientValidation>)>) -> ClientValidations {
        listeners.sort_by(|a, b| a.0.cmp(&b.0));
        listeners.dedup_by(|later, first| later.0 == first.0);
        ClientValidations {
            listeners,
            ingress_hosts: IngressHosts::default(),
        }
    }

    /// With the Ingress hosts that verify clients.
    pub fn with_ingress_hosts(mut self, hosts: IngressHosts) -> ClientValidations {
        self.ingress_hosts = hosts;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty() && self.ingress_hosts.is_empty()
    }

    /// What the HTTPS listener that takes `host` on a connection to `local` (its address, and
    /// its port when it is a listener's own) asks of its clients (`None`: nothing, or no
    /// Gateway listener takes it).
    #[inline]
    pub fn of(
        &self,
        routes: &GatewayRoutes,
        local: (Option<IpAddr>, Option<u16>),
        host: Option<&[u8]>,
    ) -> Option<&Arc<ClientValidation>> {
        self.of_listener(routes, local, host).or_else(|| {
            // Ingress hosts are served on the shared TLS port alone.
            if local.1.is_some() {
                return None;
            }
            self.ingress_hosts.of(host?)
        })
    }

    fn of_listener(
        &self,
        routes: &GatewayRoutes,
        local: (Option<IpAddr>, Option<u16>),
        host: Option<&[u8]>,
    ) -> Option<&Arc<ClientValidation>> {
        if self.listeners.is_empty() {
            return None;
        }
        let (address, port, key) = routes.https_listener(local, host)?;
        let i = self
            .listeners
            .binary_search_by(|((a, p, k), _)| (*a, *p, &**k).cmp(&(address, port, key)))
            .ok()?;
        self.listeners.get(i).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::cert_auth::{CertVerdict, Proved, VerifyClient};
    use crate::table::gateway::ListenerHosts;
    use crate::table::pattern::Pattern;

    fn validation(ca: &[u8], insecure_fallback: bool) -> Arc<ClientValidation> {
        Arc::new(ClientValidation {
            ca: Arc::from(ca),
            insecure_fallback,
            origin: "infra/gw/https".into(),
            ingress: None,
        })
    }

    fn ingress(verify: VerifyClient, match_cn: Option<&str>) -> IngressCertAuth {
        IngressCertAuth {
            verify,
            depth: 1,
            error_page: None,
            pass_certificate: false,
            match_cn: match_cn.map(|p| Pattern::search(p).unwrap()),
        }
    }

    #[test]
    fn ingress_hosts_are_found_by_exact_name_then_wildcard() {
        let v = |ca: &[u8]| {
            Arc::new(ClientValidation {
                ingress: Some(ingress(VerifyClient::On, None)),
                ..(*validation(ca, true)).clone()
            })
        };
        let hosts = IngressHosts::new(vec![
            ("*.Wild.test".into(), v(b"wild")),
            ("a.wild.test".into(), v(b"a")),
            ("b.test".into(), v(b"b")),
            ("b.test".into(), v(b"second")),
        ]);
        let ca = |h: &str| {
            hosts
                .of(h.as_bytes())
                .map(|v| String::from_utf8_lossy(&v.ca).into_owned())
        };
        assert_eq!(ca("a.wild.test").as_deref(), Some("a"));
        assert_eq!(ca("X.WILD.test:443").as_deref(), Some("wild"));
        assert_eq!(ca("b.test.").as_deref(), Some("b"));
        // One label, as an Ingress wildcard matches.
        assert_eq!(ca("x.y.wild.test"), None);
        assert_eq!(ca("wild.test"), None);
        assert_eq!(ca("[::1]:443"), None);
        // On a Gateway listener's own port, Ingress hosts are not served.
        let all = ClientValidations::default().with_ingress_hosts(hosts.clone());
        let routes = GatewayRoutes::default();
        assert!(
            all.of(&routes, (None, Some(8443)), Some(b"b.test"))
                .is_none()
        );
        assert!(all.of(&routes, (None, None), Some(b"b.test")).is_some());
        assert!(!all.is_empty());
    }

    #[test]
    fn ingress_verification_judges_as_nginx() {
        let ca: &[u8] = b"ca-1";
        let proved = |ca: Option<&'static [u8]>, presented: bool, subject: &'static str| Proved {
            ca,
            presented,
            subject,
        };
        let none = proved(None, false, "");
        let bad = proved(None, true, "CN=mallory");
        let other = proved(Some(b"ca-2"), true, "CN=eve");
        let good = proved(Some(b"ca-1"), true, "CN=alice,O=shop");
        let on = ingress(VerifyClient::On, None);
        assert_eq!(on.judge(ca, none), CertVerdict::Refused);
        assert_eq!(on.judge(ca, bad), CertVerdict::Refused);
        assert_eq!(on.judge(ca, other), CertVerdict::Refused);
        assert_eq!(on.judge(ca, good), CertVerdict::Pass);
        let optional = ingress(VerifyClient::Optional, None);
        assert_eq!(optional.judge(ca, none), CertVerdict::Pass);
        assert_eq!(optional.judge(ca, bad), CertVerdict::Refused);
        assert_eq!(optional.judge(ca, good), CertVerdict::Pass);
        let no_ca = ingress(VerifyClient::OptionalNoCa, None);
        assert_eq!(no_ca.judge(ca, bad), CertVerdict::Pass);
        assert_eq!(no_ca.judge(ca, none), CertVerdict::Pass);
        let cn = ingress(VerifyClient::On, Some("CN=alice"));
        assert_eq!(cn.judge(ca, good), CertVerdict::Pass);
        let bob = proved(Some(b"ca-1"), true, "CN=bob");
        assert_eq!(cn.judge(ca, bob), CertVerdict::Unauthorized);
        // Without a certificate the subject is empty: not found in it.
        let cn_optional = ingress(VerifyClient::Optional, Some("CN=alice"));
        assert_eq!(cn_optional.judge(ca, none), CertVerdict::Unauthorized);
        assert_eq!(
            VerifyClient::parse(" optional_no_ca"),
            Some(VerifyClient::OptionalNoCa)
        );
        assert_eq!(VerifyClient::parse("off"), None);
    }

    #[test]
    fn a_name_gets_the_validation_of_the_listener_its_routes_are_on() {
        let mut routes = GatewayRoutes::default();
        let hosts: &mut ListenerHosts = &mut routes.https_hosts;
        hosts.add(Some("a.test"), false);
        hosts.add(Some(".wild.test"), true);
        hosts.add(None, false);
        hosts.add(Some("open.test"), false);
        hosts.finish();
        let key = |h: &str| (None, None, Box::<str>::from(h));
        let v = ClientValidations::new(vec![
            (key(".wild.test"), validation(b"wild", false)),
            (key(""), validation(b"any", false)),
            (key("a.test"), validation(b"a", true)),
        ]);
        let ca = |host: Option<&str>| {
            v.of(&routes, (None, None), host.map(str::as_bytes))
                .map(|v| String::from_utf8_lossy(&v.ca).into_owned())
        };
        assert_eq!(ca(Some("a.test")).as_deref(), Some("a"));
        assert_eq!(ca(Some("x.wild.test")).as_deref(), Some("wild"));
        // The most specific listener decides: one that verifies nothing takes its name.
        assert_eq!(ca(Some("open.test")), None);
        // Any other name, and no name at all, is the hostname-less listener's.
        assert_eq!(ca(Some("other.test")).as_deref(), Some("any"));
        assert_eq!(ca(None).as_deref(), Some("any"));
        assert_eq!(ca(Some("A.TEST.")).as_deref(), Some("a"));
        // No validation anywhere: nothing is looked up.
        assert!(
            ClientValidations::default()
                .of(&routes, (None, None), None)
                .is_none()
        );
    }

    #[test]
    fn only_the_listeners_own_ca_admits_unless_it_falls_back() {
        let strict = validation(b"ca-1", false);
        assert!(strict.admits(Some(b"ca-1")));
        assert!(!strict.admits(Some(b"ca-2")));
        assert!(!strict.admits(None));
        let fallback = validation(b"ca-1", true);
        assert!(fallback.admits(None) && fallback.admits(Some(b"ca-2")));
    }
}
