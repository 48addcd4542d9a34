//! TLS passthrough on the TLS port (ingress-nginx's `ssl-passthrough`): the host names whose
//! connections switchyard does not terminate but relays whole to an entry's endpoints, chosen
//! by the server name of the client's hello. Data only: the TLS port reads the name
//! (`data::passthrough`), this says where it goes. No Kubernetes, Pingora or tokio.

use crate::table::matcher::HostPattern;
use crate::table::shared::EntryId;

/// One host relayed unterminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passthrough {
    pub host: HostPattern,
    pub entry: EntryId,
}

/// The entry a server name's connections are relayed to: an exact host first, then the
/// wildcard with the longest suffix; `name` in lower case.
pub fn passthrough_for(hosts: &[Passthrough], name: &str) -> Option<EntryId> {
    by_server_name(hosts.iter().map(|p| (Some(&p.host), p.entry)), name)
}

/// What the host pattern that takes `name` best leads to: an exact host first, then the
/// wildcard with the longest suffix (an Ingress's takes one label, a Gateway's any number).
/// Hosts `None` (any name) are not this function's: callers rank them last.
pub fn by_server_name<'h, T>(
    hosts: impl Iterator<Item = (Option<&'h HostPattern>, T)> + Clone,
    name: &str,
) -> Option<T> {
    let exact = hosts.clone().find_map(|(h, t)| match h {
        Some(HostPattern::Exact(h)) if h == name => Some(t),
        _ => None,
    });
    exact.or_else(|| {
        hosts
            .filter_map(|(h, t)| {
                let (suffix, one_label) = match h? {
                    HostPattern::OneLabel(s) => (s, true),
                    HostPattern::Wildcard(s) => (s, false),
                    HostPattern::Exact(_) => return None,
                };
                let label = name.strip_suffix(suffix.as_str())?;
                let fits = !label.is_empty() && (!one_label || !label.contains('.'));
                fits.then_some((suffix.len(), t))
            })
            // The first of equally long suffixes, as the list orders them.
            .fold(None, |best: Option<(usize, T)>, (len, t)| match best {
                Some((b, _)) if b >= len => best,
                _ => Some((len, t)),
            })
            .map(|(_, t)| t)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_first_then_the_longest_wildcard() {
        let hosts = [
            Passthrough {
                host: HostPattern::OneLabel(".example.com".into()),
                entry: 1,
            },
            Passthrough {
                host: HostPattern::Exact("vault.example.com".into()),
                entry: 2,
            },
            Passthrough {
                host: HostPattern::OneLabel(".apps.example.com".into()),
                entry: 3,
            },
        ];
        assert_eq!(passthrough_for(&hosts, "vault.example.com"), Some(2));
        assert_eq!(passthrough_for(&hosts, "argo.example.com"), Some(1));
        assert_eq!(passthrough_for(&hosts, "x.apps.example.com"), Some(3));
        // One label only, as an Ingress wildcard.
        assert_eq!(passthrough_for(&hosts, "a.b.c.example.com"), None);
        assert_eq!(passthrough_for(&hosts, "example.com"), None);
        assert_eq!(passthrough_for(&[], "example.com"), None);
    }
}
