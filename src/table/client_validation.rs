//! Client-certificate validation that Gateways' HTTPS listeners ask for (`spec.tls.frontend`):
//! per listener — its frontend's address and its hostname, as the Gateway routes' listener
//! hosts hold them — the CA bundle client certificates are verified against, and whether a
//! client without a valid one is served anyway (`AllowInsecureFallback`).
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
    /// The Gateway and listener (`namespace/name/listener`), for the table dump and logs.
    pub origin: Box<str>,
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

/// The validating HTTPS listeners of the table, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClientValidations {
    pub listeners: Vec<(ListenerKey, Arc<ClientValidation>)>,
}

impl ClientValidations {
    /// From the listeners in any order; the first of two with one key is kept (the caller
    /// puts the one that wins first).
    pub fn new(mut listeners: Vec<(ListenerKey, Arc<ClientValidation>)>) -> ClientValidations {
        listeners.sort_by(|a, b| a.0.cmp(&b.0));
        listeners.dedup_by(|later, first| later.0 == first.0);
        ClientValidations { listeners }
    }

    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty()
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
    use crate::table::gateway::ListenerHosts;

    fn validation(ca: &[u8], insecure_fallback: bool) -> Arc<ClientValidation> {
        Arc::new(ClientValidation {
            ca: Arc::from(ca),
            insecure_fallback,
            origin: "infra/gw/https".into(),
        })
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
