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
    let exact = hosts.iter().find_map(|p| match &p.host {
        HostPattern::Exact(h) if h == name => Some(p.entry),
        _ => None,
    });
    exact.or_else(|| {
        hosts
            .iter()
            .filter_map(|p| {
                let (suffix, one_label) = match &p.host {
                    HostPattern::OneLabel(s) => (s, true),
                    HostPattern::Wildcard(s) => (s, false),
                    HostPattern::Exact(_) => return None,
                };
                let label = name.strip_suffix(suffix.as_str())?;
                let fits = !label.is_empty() && (!one_label || !label.contains('.'));
                fits.then_some((suffix.len(), p.entry))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, entry)| entry)
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
