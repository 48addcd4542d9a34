//! What an Ingress adds to the requests of its rules (`RoutePolicy`): a path rewrite, the
//! redirect of plain HTTP to HTTPS, and source ranges. Data only, built by translate and read
//! by the decision core, which alone decides what a request gets from it. Pure: no Kubernetes,
//! Pingora or tokio.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::table::cidr::Cidr;
use crate::table::upstream::BackendProtocol;

/// Index of a policy in `RoutingTable::policies`.
pub type PolicyId = u32;

/// One Ingress's settings for the routes it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoutePolicy {
    /// The Ingress that made it (`namespace/name`), for `/explain` and logs.
    pub origin: Box<str>,
    /// Replaces the matched path (`switchyard.io/rewrite-target`): `/` strips it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Arc<str>>,
    /// On the plain HTTP port, answer a redirect to HTTPS with this status instead of
    /// proxying (hosts in the Ingress's `spec.tls`, unless `switchyard.io/ssl-redirect` is
    /// "false"; or any host when it is "true").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https_redirect: Option<u16>,
    /// Only clients in these networks are served (`switchyard.io/allowlist-source-range`);
    /// empty: any client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Cidr>,
    /// Clients in these networks are refused (`switchyard.io/denylist-source-range`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Cidr>,
    /// How these routes' requests reach the endpoints (`switchyard.io/backend-protocol`),
    /// instead of the Service port's protocol; server name and verification stay the
    /// Service's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<BackendProtocol>,
    /// The wait for the endpoint's response header and between reads of its body
    /// (`switchyard.io/proxy-read-timeout`), instead of `--server-timeout`.
    #[serde(skip_serializing_if = "Option::is_none", with = "millis")]
    pub server_timeout: Option<Duration>,
    /// Longest request body, in bytes (`switchyard.io/proxy-body-size`); a longer one is
    /// answered 413 and not sent on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body: Option<u64>,
}

/// Durations as whole milliseconds in the table's JSON.
mod millis {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }
}

impl RoutePolicy {
    /// The policy of Ingress `origin` that changes nothing (each setting then set apart).
    pub fn of(origin: &str) -> RoutePolicy {
        RoutePolicy {
            origin: origin.into(),
            rewrite: None,
            https_redirect: None,
            allow: Vec::new(),
            deny: Vec::new(),
            protocol: None,
            server_timeout: None,
            max_body: None,
        }
    }

    /// Whether a client at `ip` may use the routes of this policy: not in a denied network,
    /// and in an allowed one when there are any. A request whose address is unknown is
    /// refused where a list applies (never the case for a socket, but the rule must not fail
    /// open).
    pub fn admits(&self, ip: Option<IpAddr>) -> bool {
        if self.allow.is_empty() && self.deny.is_empty() {
            return true;
        }
        let Some(ip) = ip else {
            return false;
        };
        !self.deny.iter().any(|n| n.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|n| n.contains(ip)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> RoutePolicy {
        RoutePolicy {
            allow: allow.iter().map(|s| s.parse().unwrap()).collect(),
            deny: deny.iter().map(|s| s.parse().unwrap()).collect(),
            ..RoutePolicy::of("default/web")
        }
    }

    #[test]
    fn source_ranges_admit_and_refuse() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let open = policy(&[], &[]);
        assert!(open.admits(ip("1.2.3.4")) && open.admits(None));
        let allow = policy(&["10.0.0.0/8"], &[]);
        assert!(allow.admits(ip("10.1.1.1")));
        assert!(!allow.admits(ip("192.168.0.1")));
        assert!(!allow.admits(None));
        let both = policy(&["10.0.0.0/8"], &["10.9.0.0/16"]);
        assert!(both.admits(ip("10.1.1.1")));
        assert!(!both.admits(ip("10.9.1.1")), "deny beats allow");
        let deny = policy(&[], &["127.0.0.0/8"]);
        assert!(!deny.admits(ip("127.0.0.1")) && deny.admits(ip("8.8.8.8")));
    }
}
