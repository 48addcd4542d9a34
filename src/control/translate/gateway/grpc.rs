//! A GRPCRoute read as the HTTPRoute it means, so that one translation (attachment, matches,
//! precedence, filters, backends, status) serves both kinds: a gRPC call is an HTTP/2 POST to
//! `/<service>/<method>`. An `Exact` service and method become the exact path, a service alone
//! the prefix `/<service>/`, a method alone (or any `RegularExpression`) a whole-path regular
//! expression; header matches and filters carry over as they are. The route keeps its kind
//! beside it (`RouteKind`): listeners' `allowedRoutes.kinds`, ReferenceGrants, the status map
//! and the backends' protocol are decided by it, not here.
//!
//! Pure and total: it must not warn, refuse or resolve anything. A match it cannot express
//! exactly is written as a path of type [`INVALID_MATCH`] whose value says why, which the
//! rule translation skips with that warning (never served wider than asked).

use super::api::*;

/// The path type of a GRPCRoute match that cannot be served; its value is the reason.
/// Honoured for GRPCRoutes only (`rules.rs`), so an HTTPRoute cannot name it.
pub(super) const INVALID_MATCH: &str = "GRPCRoute: invalid method match";

/// The HTTPRoute a GRPCRoute means: the same metadata, parents and hostnames, each rule's
/// matches as paths and headers, its filters and backends as they are.
pub(super) fn as_http_route(g: &GRPCRoute) -> HTTPRoute {
    HTTPRoute {
        metadata: g.metadata.clone(),
        spec: HTTPRouteSpec {
            parent_refs: g.spec.parent_refs.clone(),
            hostnames: g.spec.hostnames.clone(),
            // No default rule: an empty list routes nothing, as the spec leaves it.
            rules: Some(g.spec.rules.iter().map(rule).collect()),
        },
        status: None,
    }
}

fn rule(r: &GRPCRouteRule) -> HTTPRouteRule {
    HTTPRouteRule {
        name: r.name.clone(),
        // Empty: the HTTPRoute default, `PathPrefix /`: every gRPC request.
        matches: (!r.matches.is_empty()).then(|| r.matches.iter().map(route_match).collect()),
        filters: r.filters.iter().map(filter).collect(),
        backend_refs: r
            .backend_refs
            .iter()
            .map(|b| HTTPBackendRef {
                backend: b.backend.clone(),
                weight: b.weight,
                filters: b.filters.iter().map(filter).collect(),
            })
            .collect(),
        timeouts: None,
    }
}

fn filter(f: &GRPCRouteFilter) -> HTTPRouteFilter {
    HTTPRouteFilter {
        type_: f.type_.clone(),
        request_header_modifier: f.request_header_modifier.clone(),
        response_header_modifier: f.response_header_modifier.clone(),
        request_redirect: None,
        url_rewrite: None,
        request_mirror: f.request_mirror.clone(),
        extension_ref: f.extension_ref.clone(),
        cors: None,
    }
}

fn route_match(m: &GRPCRouteMatch) -> HTTPRouteMatch {
    HTTPRouteMatch {
        path: m.method.as_ref().map(method_path),
        headers: m.headers.clone(),
        query_params: Vec::new(),
        // gRPC calls are POSTs; the spec matches no HTTP method, so neither does this.
        method: None,
    }
}

/// The path match of a method match.
fn method_path(m: &GRPCMethodMatch) -> HTTPPathMatch {
    let path = |type_: &str, value: String| HTTPPathMatch {
        type_: Some(type_.into()),
        value: Some(value),
    };
    let service = m.service.as_deref().filter(|s| !s.is_empty());
    let method = m.method.as_deref().filter(|s| !s.is_empty());
    match m.type_.as_deref().unwrap_or("Exact") {
        "Exact" => {
            if let Some(s) = service.filter(|s| !valid_service(s)) {
                return path(
                    INVALID_MATCH,
                    format!("gRPC service {s:?} is not a valid service name"),
                );
            }
            if let Some(m) = method.filter(|m| !valid_method(m)) {
                return path(
                    INVALID_MATCH,
                    format!("gRPC method {m:?} is not a valid method name"),
                );
            }
            match (service, method) {
                (Some(s), Some(m)) => path("Exact", format!("/{s}/{m}")),
                // The service's every method; the prefix is element-wise (`/a.B/` does not
                // take `/a.BC/M`).
                (Some(s), None) => path("PathPrefix", format!("/{s}/")),
                // Characters of a valid method need no escaping.
                (None, Some(m)) => path("RegularExpression", format!("/[^/]+/{m}")),
                (None, None) => path(
                    INVALID_MATCH,
                    "a gRPC method match names neither service nor method".into(),
                ),
            }
        }
        "RegularExpression" => {
            if service.is_none() && method.is_none() {
                return path(
                    INVALID_MATCH,
                    "a gRPC method match names neither service nor method".into(),
                );
            }
            // Each side whole, as a path pattern is matched whole; an absent side is any
            // one path segment.
            path(
                "RegularExpression",
                format!(
                    "/(?:{})/(?:{})",
                    service.unwrap_or("[^/]+"),
                    method.unwrap_or("[^/]+")
                ),
            )
        }
        other => path(
            INVALID_MATCH,
            format!("gRPC method match type {other:?} is not supported"),
        ),
    }
}

/// The CRD's pattern for an `Exact` service: `^(?i)\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`.
/// A `.` is written escaped where the service is put in a pattern, so it is left out there.
fn valid_service(s: &str) -> bool {
    let s = s.strip_prefix('.').unwrap_or(s);
    !s.is_empty() && s.split('.').all(valid_method)
}

/// The CRD's pattern for an `Exact` method: `^[A-Za-z_][A-Za-z_0-9]*$`.
fn valid_method(m: &str) -> bool {
    let mut chars = m.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(service: Option<&str>, method: Option<&str>) -> GRPCMethodMatch {
        GRPCMethodMatch {
            type_: None,
            service: service.map(Into::into),
            method: method.map(Into::into),
        }
    }

    fn shown(p: HTTPPathMatch) -> (String, String) {
        (p.type_.unwrap_or_default(), p.value.unwrap_or_default())
    }

    #[test]
    fn method_matches_become_the_paths_they_mean() {
        let s = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
        assert_eq!(
            shown(method_path(&exact(Some(s), Some("Echo")))),
            ("Exact".into(), format!("/{s}/Echo"))
        );
        assert_eq!(
            shown(method_path(&exact(Some(s), None))),
            ("PathPrefix".into(), format!("/{s}/"))
        );
        assert_eq!(
            shown(method_path(&exact(None, Some("Echo")))),
            ("RegularExpression".into(), "/[^/]+/Echo".into())
        );
        let re = GRPCMethodMatch {
            type_: Some("RegularExpression".into()),
            service: Some(r"foo\..*".into()),
            method: None,
        };
        assert_eq!(
            shown(method_path(&re)),
            ("RegularExpression".into(), r"/(?:foo\..*)/(?:[^/]+)".into())
        );
    }

    #[test]
    fn a_match_that_cannot_be_said_exactly_is_marked_invalid() {
        for m in [
            exact(Some("a/b"), Some("M")),
            exact(Some("a"), Some("M/x")),
            exact(Some("a..b"), None),
            exact(None, None),
            GRPCMethodMatch {
                type_: Some("Prefix".into()),
                service: Some("a".into()),
                method: None,
            },
        ] {
            let (ty, why) = shown(method_path(&m));
            assert_eq!(ty, INVALID_MATCH, "{m:?}");
            assert!(!why.is_empty());
        }
        assert!(valid_service(".a_1.B2"));
        assert!(!valid_service("1a"));
    }

    #[test]
    fn no_matches_is_every_call_and_no_rules_is_none() {
        let g = GRPCRoute {
            spec: GRPCRouteSpec {
                rules: vec![GRPCRouteRule::default()],
                ..GRPCRouteSpec::default()
            },
            ..GRPCRoute::default()
        };
        let h = as_http_route(&g);
        assert_eq!(
            h.spec.rules.as_ref().map(|r| r[0].matches.is_none()),
            Some(true)
        );
        let h = as_http_route(&GRPCRoute::default());
        assert_eq!(h.spec.rules, Some(Vec::new()));
    }
}
