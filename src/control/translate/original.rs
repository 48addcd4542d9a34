//! The migration preview: the original service-loadbalancer's plain-HTTP routing, modelled on
//! its HAProxy template, set against the table switchyard built from the same Services, to list
//! the requests the two would answer differently (`--dry-run --migration-preview`).
//!
//! The model is the template's `httpfrontend`: Services in name order, each
//! `acl url_acl path_beg /<name>` (a raw prefix: `/web` also takes `/webshop`) or
//! `acl host_acl hdr(host) <lb.host values>` (exact and case-sensitive, port included), the
//! first match wins, and its backend rewrites `^/<name>/?` to `/`. Names had no namespace, a
//! Service without endpoints was left out, and unmatched requests went to the default backend
//! (`/healthz` 200, else `--default-return-code`). `lb.aclMatch` applied on the TLS port only,
//! and TLS-terminated and TCP Services are not previewed. Pure: no I/O, no clock.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;

use super::inputs::meta_key;
use super::view::*;
use crate::control::translate::build;
use crate::table::{EntryKey, Frontend, RoutingTable};

/// One request the two answer differently.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// The Host header sent, if any.
    pub host: Option<String>,
    pub path: String,
    pub original: Outcome,
    pub switchyard: Outcome,
}

/// Where one request goes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Proxied to `service` (`namespace/name:port`), which sees `path`.
    Proxied { service: String, path: String },
    /// Answered by the load balancer itself with `status`.
    Answered { status: u16 },
}

/// A plain-HTTP Service port as the original rendered it.
struct Rule<'a> {
    /// `name` or `name:port`, without namespace.
    name: String,
    /// The raw `lb.host` value split on spaces (HAProxy's pattern list).
    hosts: Vec<&'a str>,
    key: &'a EntryKey,
}

/// The requests `services` would see answered differently by the original and by `table`
/// (built from them; `not_found` is `--default-return-code`, `healthz` is
/// `--traffic-healthz`), in a stable order.
pub fn migration_preview(
    services: &[Service],
    table: &RoutingTable,
    not_found: u16,
    traffic_healthz: bool,
) -> Vec<Difference> {
    let host_of = |ns: &str, name: &str| -> Vec<&str> {
        services
            .iter()
            .find(|s| meta_key(&s.metadata.namespace, &s.metadata.name) == (ns, name))
            .and_then(|s| s.metadata.annotations.as_ref())
            .and_then(|a| a.get(annotation::HOST))
            .map(|h| h.split_ascii_whitespace().collect())
            .unwrap_or_default()
    };
    let mut rules: Vec<Rule<'_>> = table
        .entries
        .iter()
        .filter(|e| e.frontend == Frontend::Http && !e.endpoints.is_empty())
        .map(|e| Rule {
            name: build::entry_name(None, &e.key.service, e.key.port),
            hosts: host_of(&e.key.namespace, &e.key.service),
            key: &e.key,
        })
        .collect();
    rules.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.key.cmp(b.key)));

    let mut probes: BTreeSet<(Option<String>, String)> = BTreeSet::new();
    for r in &rules {
        for p in ["", "/", "/x", "x"] {
            probes.insert((None, format!("/{}{p}", r.name)));
        }
        for h in &r.hosts {
            probes.insert((Some((*h).to_string()), "/".into()));
            probes.insert((Some((*h).to_string()), format!("/{}/x", r.name)));
        }
    }
    for rule in table.http.any_host.iter() {
        probes.insert((None, rule.prefix.to_string()));
        probes.insert((None, format!("{}/x", rule.prefix.trim_end_matches('/'))));
    }
    for (host, rules) in &table.http.exact {
        for rule in rules.iter() {
            probes.insert((Some(host.to_string()), rule.prefix.to_string()));
        }
    }
    for (suffix, rules) in &table.http.wildcard {
        for rule in rules.iter() {
            probes.insert((Some(format!("a{suffix}")), rule.prefix.to_string()));
        }
    }
    probes.insert((None, "/healthz".into()));

    let answered = |path: &str| Outcome::Answered {
        status: if traffic_healthz && path == "/healthz" {
            200
        } else {
            not_found
        },
    };
    let mut out = Vec::new();
    for (host, path) in probes {
        let original = match rules.iter().find(|r| {
            path.starts_with(&format!("/{}", r.name))
                || host.as_deref().is_some_and(|h| r.hosts.contains(&h))
        }) {
            Some(r) => Outcome::Proxied {
                service: r.key.to_string(),
                path: original_rewrite(&path, &r.name),
            },
            // The default backend: the controller's own server.
            None if path == "/healthz" => Outcome::Answered { status: 200 },
            None => Outcome::Answered { status: not_found },
        };
        // The probes are built from names and configured prefixes, so they are routed as
        // written (the data plane first removes dot-segments, which they rarely hold).
        let normalized = path.as_str();
        let switchyard = match table
            .http
            .lookup(host.as_deref().map(str::as_bytes), normalized)
        {
            None => answered(normalized),
            Some(rule) => match table.entry(rule.target) {
                None => answered(normalized),
                Some(e) if e.endpoints.is_empty() => Outcome::Answered { status: 503 },
                Some(e) => Outcome::Proxied {
                    service: e.key.to_string(),
                    path: if rule.strip {
                        crate::table::matcher::strip_prefix(normalized, &rule.prefix)
                    } else {
                        path.clone()
                    },
                },
            },
        };
        if original != switchyard {
            out.push(Difference {
                host,
                path,
                original,
                switchyard,
            });
        }
    }
    out
}

/// The template's `reqrep ^([^\ :]*)\ /<name>[/]?(.*) \1\ /\2`: a leading `/<name>` and one
/// optional `/` after it become `/`, whatever follows (`/webshop` becomes `/shop`).
fn original_rewrite(path: &str, name: &str) -> String {
    let Some(rest) = path.strip_prefix('/').and_then(|p| p.strip_prefix(name)) else {
        return path.to_string();
    };
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    format!("/{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::translate::translate;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::discovery::v1::{Endpoint as SliceEndpoint, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn svc(ns: &str, name: &str, host: Option<&str>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                annotations: host.map(|h| BTreeMap::from([(annotation::HOST.into(), h.into())])),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn slice(ns: &str, name: &str) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{name}-1")),
                namespace: Some(ns.into()),
                labels: Some(BTreeMap::from([(
                    SERVICE_NAME_LABEL.to_string(),
                    name.to_string(),
                )])),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(vec![SliceEndpoint {
                addresses: vec!["10.0.0.1".into()],
                ..Default::default()
            }]),
            ports: Some(vec![EndpointPort {
                port: Some(8080),
                ..Default::default()
            }]),
        }
    }

    fn preview(services: &[Service], slices: &[EndpointSlice]) -> Vec<Difference> {
        let (table, _) = translate(services, slices, &Options::default(), None);
        migration_preview(services, &table, 404, true)
    }

    fn find<'d>(d: &'d [Difference], host: Option<&str>, path: &str) -> Option<&'d Difference> {
        d.iter()
            .find(|x| x.host.as_deref() == host && x.path == path)
    }

    fn proxied(service: &str, path: &str) -> Outcome {
        Outcome::Proxied {
            service: service.into(),
            path: path.into(),
        }
    }

    #[test]
    fn the_same_routes_give_no_difference() {
        let d = preview(&[svc("default", "web", None)], &[slice("default", "web")]);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/webx"], "/web, /web/, /web/x are the same in both");
    }

    #[test]
    fn raw_prefixes_zero_endpoints_and_host_routes_show() {
        let services = [
            svc("default", "web", None),
            svc("default", "empty", None),
            svc("default", "shop", Some("shop.example.com")),
        ];
        let d = preview(
            &services,
            &[slice("default", "web"), slice("default", "shop")],
        );
        let webx = find(&d, None, "/webx").expect("a raw prefix: /webx");
        assert_eq!(webx.original, proxied("default/web:80", "/x"));
        assert_eq!(webx.switchyard, Outcome::Answered { status: 404 });
        let empty = find(&d, None, "/empty").expect("zero endpoints");
        assert_eq!(empty.original, Outcome::Answered { status: 404 });
        assert_eq!(empty.switchyard, Outcome::Answered { status: 503 });
        let shop = find(&d, None, "/shop/x").expect("a host Service's path route");
        assert_eq!(shop.original, proxied("default/shop:80", "/x"));
        let host = find(&d, Some("shop.example.com"), "/shop/x").expect("unstripped");
        assert_eq!(host.switchyard, proxied("default/shop:80", "/shop/x"));
        assert!(
            find(&d, Some("shop.example.com"), "/").is_none(),
            "same on /"
        );
        assert!(find(&d, None, "/healthz").is_none(), "both answer 200");
    }

    #[test]
    fn namespaced_names_show() {
        let d = preview(&[svc("team", "api", None)], &[slice("team", "api")]);
        let api = find(&d, None, "/api/x").expect("/api was the original's route");
        assert_eq!(api.original, proxied("team/api:80", "/x"));
        assert_eq!(api.switchyard, Outcome::Answered { status: 404 });
        let ns = find(&d, None, "/team/api").expect("switchyard's /team/api");
        assert_eq!(ns.switchyard, proxied("team/api:80", "/"));
    }

    #[test]
    fn the_rewrite_is_the_templates() {
        assert_eq!(original_rewrite("/web", "web"), "/");
        assert_eq!(original_rewrite("/web/", "web"), "/");
        assert_eq!(original_rewrite("/web/a/b", "web"), "/a/b");
        assert_eq!(original_rewrite("/webshop", "web"), "/shop");
        assert_eq!(original_rewrite("/other", "web"), "/other");
    }
}
