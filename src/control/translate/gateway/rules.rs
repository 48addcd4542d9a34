//! The Gateway build's fourth phase: an attached route's rules turned into the table's form
//! (matches, filters, timeouts, mirrors, weighted backends resolved to entries), each rule
//! that cannot be served dropped alone, and the route's conditions that follow from its rules
//! (`PartiallyInvalid`, `ResolvedRefs`). It must not decide where a route attaches nor touch
//! Gateway or listener status.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::api::*;
use super::cache::{RouteCache, RouteOutput};
use super::grpc::INVALID_MATCH;
use super::view::{GRPC_ROUTE, Grants, Matched, PathKind, Place, RouteInputs};
use crate::control::translate::annotations::show;
use crate::control::translate::build::Builder;
use crate::control::translate::view::*;
use crate::table::balance::Share;
use crate::table::gateway::{
    Action, Backend, Backends, GatewayRoutes, GatewayRule, HeaderFilter, Mirror, PathRewrite,
    Redirect, ValueMatch,
};
use crate::table::matcher::validate_prefix;
use crate::table::pattern::{Pattern, PatternError, Patterns};
use crate::table::policy::{Cors, CorsFlavor, Origins};
use crate::table::{EntryId, EntryKey, Shared};

/// The most regular expressions (path, header and query patterns together) one HTTPRoute's
/// served rules may hold: with each bounded by `Pattern::SIZE_LIMIT`, one route can take at
/// most this many times that. A rule that would go beyond is dropped.
const MAX_ROUTE_PATTERNS: usize = 64;

/// Why one rule cannot be served: the route's `Accepted` reason when no rule is left
/// (`UnsupportedValue`, or `IncompatibleFilters` for filters the spec says may not be
/// combined), and what the status says.
pub(super) struct Invalid {
    reason: &'static str,
    message: String,
}

impl Invalid {
    fn unsupported(message: String) -> Self {
        Invalid {
            reason: "UnsupportedValue",
            message,
        }
    }
}

/// Why a backend reference cannot be used (the `ResolvedRefs` reasons).
pub(super) struct Unresolved {
    pub(super) reason: &'static str,
    pub(super) message: String,
}

/// What serving a route's rules leaves for its conditions.
pub(super) struct Served {
    /// The rules dropped, in order.
    dropped: Vec<Invalid>,
    /// The first backend (or filter) that does not resolve.
    resolved: Result<(), Unresolved>,
    /// Some rule serves.
    any: bool,
}

impl Builder<'_> {
    /// The route's rules in `out` (`rules`, and each one's matches in `made`), and what the
    /// route's conditions need to know of them.
    pub(super) fn serve_rules(
        &mut self,
        who: &ObjectRef,
        route: &HTTPRoute,
        given: &RouteInputs<'_, '_>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
        compiled: &mut PatternSource<'_>,
        out: &mut RouteOutput,
    ) -> Served {
        let mut resolved: Result<(), Unresolved> = Ok(());
        let default_rule = [HTTPRouteRule::default()];
        let route_rules = route.spec.rules.as_deref().unwrap_or(&default_rule);
        // Rules that cannot be served (an invalid regular expression, a filter switchyard
        // does not offer, filters the spec says may not be combined): each is dropped
        // alone, as the spec's `PartiallyInvalid` condition describes, and the route's
        // other rules serve. The reason is the first dropped rule's.
        let mut dropped: Vec<Invalid> = Vec::new();
        let mut route_patterns = 0;
        for (ri, rule) in route_rules.iter().enumerate() {
            let at = |i: Invalid| Invalid {
                reason: i.reason,
                message: format!("Rule {ri}: {}", i.message),
            };
            let matched = match self.rule_matches(who, rule, compiled) {
                Ok(m) => m,
                Err(why) => {
                    dropped.push(at(Invalid::unsupported(why)));
                    continue;
                }
            };
            if let Some(why) = incompatible_filters(rule) {
                dropped.push(at(Invalid {
                    reason: "IncompatibleFilters",
                    message: why,
                }));
                continue;
            }
            let patterns_here: usize = matched.iter().map(Matched::patterns).sum();
            if route_patterns + patterns_here > MAX_ROUTE_PATTERNS {
                dropped.push(at(Invalid::unsupported(format!(
                    "the route would hold more than {MAX_ROUTE_PATTERNS} regular expressions"
                ))));
                continue;
            }
            match self.gateway_rule(who, rule, ri, given, entry_ids) {
                Ok((r, unresolved)) => {
                    route_patterns += patterns_here;
                    if let (Ok(()), Some(u)) = (&resolved, unresolved) {
                        resolved = Err(u);
                    }
                    out.made.push((ri, matched));
                    out.rules.push(Arc::new(r));
                }
                Err(why) => dropped.push(at(Invalid::unsupported(why))),
            }
        }
        Served {
            dropped,
            resolved,
            any: !out.made.is_empty(),
        }
    }

    /// The route's parents' conditions after its rules: `Accepted: False` for all when no
    /// rule serves (and no place left), else `PartiallyInvalid` when some were dropped
    /// (the reason is the first dropped rule's), and `ResolvedRefs`.
    pub(super) fn rule_conditions(
        &mut self,
        who: &ObjectRef,
        generation: Option<i64>,
        served: Served,
        parents: &mut [RouteParentStatus],
        places: &mut BTreeSet<Place>,
    ) {
        let Served {
            dropped,
            resolved,
            any,
        } = served;
        let mut partially = None;
        if let Some(first) = dropped.first() {
            let reason = first.reason;
            let why = format!(
                "Dropped {}",
                dropped
                    .iter()
                    .map(|d| d.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            if !any {
                // Every rule is invalid: the route is.
                self.warn_gateway(who, format!("{why}; the route is not served"));
                for p in parents.iter_mut() {
                    p.conditions[0] =
                        Condition::new("Accepted", false, reason, why.clone(), generation);
                }
                places.clear();
            } else {
                self.warn_gateway(who, format!("{why}; the other rules serve"));
                // The spec's one reason for it, whatever the rules' causes (the message
                // says each).
                partially = Some(Condition::new(
                    "PartiallyInvalid",
                    true,
                    "UnsupportedValue",
                    why,
                    generation,
                ));
            }
        }
        let refs = match &resolved {
            Ok(()) => Condition::new("ResolvedRefs", true, "ResolvedRefs", "resolved", generation),
            Err(u) => {
                self.warn_gateway(who, u.message.clone());
                Condition::new(
                    "ResolvedRefs",
                    false,
                    u.reason,
                    u.message.clone(),
                    generation,
                )
            }
        };
        for p in parents.iter_mut() {
            p.conditions.push(refs.clone());
            // Only on a route that is accepted (the spec: never on a refused one).
            if let Some(c) = &partially
                && p.conditions[0].status == "True"
            {
                p.conditions.push(c.clone());
            }
        }
    }

    /// One rule's table form, and the first of its backends (or filters) that does not
    /// resolve. `Err`: a filter or value switchyard does not offer (the rule is then
    /// dropped); checked before any backend is resolved, so a dropped rule makes no entry.
    fn gateway_rule(
        &mut self,
        who: &ObjectRef,
        rule: &HTTPRouteRule,
        index: usize,
        given: &RouteInputs<'_, '_>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Result<(GatewayRule, Option<Unresolved>), String> {
        let mut out = GatewayRule::answering(
            format!("{}/{} rule {index}", who.namespace, who.name).into(),
            500,
        );
        let asked = rule_filters(rule, &mut out)?;
        if who.kind == GRPC_ROUTE && !asked.mirrors.is_empty() {
            // Copies go over HTTP/1.1 alone; a gRPC call copied so would reach no gRPC
            // server. The rule is dropped rather than served without its mirror.
            return Err(
                "RequestMirror on a GRPCRoute is not supported (mirrored copies go \
                        over HTTP/1.1; a gRPC call needs HTTP/2)"
                    .into(),
            );
        }
        let backend_filters = backend_filters(rule)?;
        if let Some(message) = asked.extension {
            // The spec: a filter that cannot be resolved is never skipped; the requests it
            // would have processed get an error. So the rule stays (a broader rule must not
            // take its requests without the filter) and answers 500, doing nothing else.
            let failed = GatewayRule::answering(out.origin, 500);
            let u = Unresolved {
                reason: "InvalidKind",
                message,
            };
            return Ok((failed, Some(u)));
        }
        let mut unresolved = None;
        for (to, numerator, denominator) in asked.mirrors {
            match self.gateway_backend(who, &to, given.grants, given.services, entry_ids) {
                Ok(entry) => out.mirrors.push(Mirror {
                    entry,
                    share: Share::new(numerator, denominator),
                }),
                Err(u) => {
                    unresolved.get_or_insert(u);
                }
            }
        }
        if let Some(r) = asked.redirect {
            out.action = Action::Redirect(r);
            return Ok((out, unresolved));
        }
        let backends = self.rule_backends(
            who,
            rule,
            backend_filters,
            given,
            entry_ids,
            &mut unresolved,
        );
        let total: u64 = backends.iter().map(|b| b.weight).sum();
        if total > 0 {
            out.action = Action::Backends(Backends {
                backends: backends.into_boxed_slice(),
                total,
                turn: Shared::default(),
            });
        }
        Ok((out, unresolved))
    }

    /// The backends of a rule that neither redirects nor fails, each resolved to its entry,
    /// with its share and its filters; the first that does not resolve goes to `unresolved`.
    pub(super) fn rule_backends(
        &mut self,
        who: &ObjectRef,
        rule: &HTTPRouteRule,
        backend_filters: Vec<BackendFilters>,
        given: &RouteInputs<'_, '_>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
        unresolved: &mut Option<Unresolved>,
    ) -> Vec<Backend> {
        let mut backends = Vec::new();
        for (b, (request_headers, response_headers, extension)) in
            rule.backend_refs.iter().zip(backend_filters)
        {
            let weight = u64::try_from(b.weight.unwrap_or(1)).unwrap_or(0);
            let entry = match extension {
                // Its share is answered 500, as for a backend that does not resolve.
                Some(message) => {
                    unresolved.get_or_insert(Unresolved {
                        reason: "InvalidKind",
                        message,
                    });
                    None
                }
                None => match self.gateway_backend(
                    who,
                    &b.backend,
                    given.grants,
                    given.services,
                    entry_ids,
                ) {
                    Ok(id) => Some(id),
                    Err(u) => {
                        unresolved.get_or_insert(u);
                        None
                    }
                },
            };
            backends.push(Backend {
                entry,
                weight,
                request_headers,
                response_headers,
            });
        }
        backends
    }

    /// The entry a backendRef names.
    pub(super) fn gateway_backend(
        &mut self,
        who: &ObjectRef,
        r: &BackendObjectReference,
        grants: &Grants<'_>,
        services: &HashMap<(&str, &str), (&Service, Vec<&EndpointSlice>)>,
        entry_ids: &mut HashMap<EntryKey, EntryId>,
    ) -> Result<EntryId, Unresolved> {
        let (svc, slices, sp, port) = backend_port(who, r, grants, services, "TCP")?;
        let ns = r.namespace.as_deref().unwrap_or(&who.namespace);
        let not_found = |message: String| Unresolved {
            reason: "BackendNotFound",
            message,
        };
        let id = self
            .port_entry(svc, slices, sp, port, entry_ids)
            .ok_or_else(|| {
                not_found(format!(
                    "backend {ns}/{}:{port} is a raw TCP frontend",
                    r.name
                ))
            })?;
        if who.kind == GRPC_ROUTE && !self.speaks_http2(id) {
            // A gRPC call relayed over HTTP/1.1 reaches no gRPC server; the port must say
            // HTTP/2 (`appProtocol: kubernetes.io/h2c`, the conformance Services' way).
            return Err(Unresolved {
                reason: "UnsupportedProtocol",
                message: format!(
                    "backend {ns}/{}:{port} is spoken to over HTTP/1.1; a GRPCRoute's \
                     backend needs HTTP/2 (appProtocol kubernetes.io/h2c, h2c, grpc, h2 \
                     or grpcs)",
                    r.name
                ),
            });
        }
        Ok(id)
    }

    /// Whether entry `id` is spoken to over HTTP/2 (clear or TLS).
    fn speaks_http2(&self, id: EntryId) -> bool {
        let i = id as usize;
        match &self.frozen {
            Some((_, entries)) => entries.get(i).is_some_and(|e| e.upstream.protocol.http2()),
            None => self
                .entries
                .get(i)
                .is_some_and(|e| e.upstream.protocol.http2()),
        }
    }

    /// A rule's matches as the table takes them (their rule id left to set); `Err`: the rule
    /// cannot be served (a regular expression that does not compile or is too large, or
    /// `ReplacePrefixMatch` with a regular-expression path, which has no prefix to replace).
    fn rule_matches(
        &mut self,
        who: &ObjectRef,
        rule: &HTTPRouteRule,
        compiled: &mut PatternSource<'_>,
    ) -> Result<Vec<Matched>, String> {
        let default_match = [HTTPRouteMatch::default()];
        let matches = match rule.matches.as_deref() {
            None | Some([]) => &default_match[..],
            Some(m) => m,
        };
        let mut out = Vec::with_capacity(matches.len());
        for (index, m) in matches.iter().enumerate() {
            if let Some(m) = self.candidate(who, m, index, compiled)? {
                out.push(m);
            }
        }
        if out.iter().any(|m| m.kind == PathKind::Regex) && replaces_prefix(rule) {
            return Err("ReplacePrefixMatch needs a PathPrefix match, \
                        not a RegularExpression path"
                .into());
        }
        Ok(out)
    }

    /// A match's path key and its candidate; `Ok(None)` (with a warning) for a match
    /// switchyard does not serve; `Err` for a regular expression that cannot be used (its
    /// rule is dropped).
    fn candidate(
        &mut self,
        who: &ObjectRef,
        m: &HTTPRouteMatch,
        index: usize,
        compiled: &mut PatternSource<'_>,
    ) -> Result<Option<Matched>, String> {
        let path_type = m
            .path
            .as_ref()
            .and_then(|p| p.type_.as_deref())
            .unwrap_or("PathPrefix");
        let value = m
            .path
            .as_ref()
            .and_then(|p| p.value.as_deref())
            .unwrap_or("/");
        let skip = |b: &mut Self, why: String| {
            b.warn_gateway(who, format!("{why}; that match is not served"));
            Ok(None)
        };
        // A GRPCRoute method match that cannot be said exactly (`grpc.rs`): the value is why.
        if who.kind == GRPC_ROUTE && path_type == INVALID_MATCH {
            return skip(self, value.to_string());
        }
        // A pattern is any string; exact paths and prefixes are checked as paths.
        if path_type != "RegularExpression"
            && let Err(why) = validate_prefix(value)
        {
            return skip(self, format!("path {} {why}", show(value)));
        }
        let (key, kind, pattern) = match path_type {
            "RegularExpression" => {
                let p = compiled
                    .get(value)
                    .map_err(|e| format!("path regular expression {} {e}", show(value)))?;
                (value, PathKind::Regex, Some(Box::new(p)))
            }
            "Exact" => (value, PathKind::Exact, None),
            "PathPrefix" => (
                match value.trim_end_matches('/') {
                    "" => "/",
                    t => t,
                },
                PathKind::Prefix,
                None,
            ),
            other => {
                return skip(self, format!("path type {} is not supported", show(other)));
            }
        };
        // Header names are case-insensitive (stored folded), query names are not.
        let headers = match value_matches(&m.headers, true, "header", compiled) {
            Ok(v) => v,
            Err(Unusable::Type(why)) => return skip(self, why),
            Err(Unusable::Pattern(why)) => return Err(why),
        };
        let query = match value_matches(&m.query_params, false, "query parameter", compiled) {
            Ok(v) => v,
            Err(Unusable::Type(why)) => return skip(self, why),
            Err(Unusable::Pattern(why)) => return Err(why),
        };
        Ok(Some(Matched {
            index,
            key: key.into(),
            kind,
            pattern,
            method: m.method.as_deref().map(Into::into),
            headers,
            query,
        }))
    }
}

/// What a rule's own filters ask beyond header changes.
struct Asked {
    redirect: Option<Redirect>,
    /// A backend and the share of requests it gets a copy of (numerator, denominator).
    mirrors: Vec<(BackendObjectReference, u64, u64)>,
    /// An `ExtensionRef`'s why, for `ResolvedRefs`.
    extension: Option<String>,
}

/// Reads a rule's filters (header changes and rewrites into `out`) and its timeouts.
/// The Service port of `protocol` (`TCP`, or `UDP` for a UDPRoute) a backendRef names, with
/// its Service and the Service's EndpointSlices: allowed (`allowed_backend`), the Service
/// found, a port given and the Service's port of that number and protocol
/// (`BackendNotFound` otherwise).
pub(super) fn backend_port<'a>(
    who: &'a ObjectRef,
    r: &'a BackendObjectReference,
    grants: &Grants<'_>,
    services: &'a HashMap<(&'a str, &'a str), (&'a Service, Vec<&'a EndpointSlice>)>,
    protocol: &str,
) -> Result<(&'a Service, &'a [&'a EndpointSlice], &'a ServicePort, u16), Unresolved> {
    let ns = allowed_backend(who, r, grants)?;
    let not_found = |message: String| Unresolved {
        reason: "BackendNotFound",
        message,
    };
    let Some((svc, slices)) = services.get(&(ns, r.name.as_str())) else {
        return Err(not_found(format!(
            "backend Service {ns}/{} does not exist",
            r.name
        )));
    };
    let Some(port) = r.port.and_then(|p| u16::try_from(p).ok()) else {
        return Err(not_found(format!(
            "backendRef to Service {ns}/{} has no port",
            r.name
        )));
    };
    let sp = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or(&[])
        .iter()
        .find(|sp| {
            sp.port == i32::from(port) && sp.protocol.as_deref().unwrap_or("TCP") == protocol
        });
    let Some(sp) = sp else {
        return Err(not_found(format!(
            "backend Service {ns}/{} has no {protocol} port {port}",
            r.name
        )));
    };
    Ok((svc, slices, sp, port))
}

/// Whether a route may name this backendRef: a Service (`InvalidKind`), in the route's
/// namespace or one a ReferenceGrant opens to the route's kind (`RefNotPermitted`). `Ok`: the
/// Service's namespace.
fn allowed_backend<'r>(
    who: &'r ObjectRef,
    r: &'r BackendObjectReference,
    grants: &Grants<'_>,
) -> Result<&'r str, Unresolved> {
    let group = r.group.as_deref().unwrap_or("");
    let kind = r.kind.as_deref().unwrap_or("Service");
    if !(group.is_empty() || group == "core") || kind != "Service" {
        return Err(Unresolved {
            reason: "InvalidKind",
            message: format!("backendRef {kind} {} is not a Service", r.name),
        });
    }
    let ns = r.namespace.as_deref().unwrap_or(&who.namespace);
    if ns != who.namespace
        && !grants.allows((who.kind, &who.namespace), ("", "Service", ns, &r.name))
    {
        return Err(Unresolved {
            reason: "RefNotPermitted",
            message: format!(
                "backend Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                r.name
            ),
        });
    }
    Ok(ns)
}

fn rule_filters(rule: &HTTPRouteRule, out: &mut GatewayRule) -> Result<Asked, String> {
    let mut redirect = None;
    let mut mirrors = Vec::new();
    let mut extension = None;
    for f in &rule.filters {
        match filter(f, &mut out.request_headers, &mut out.response_headers)? {
            Some(Filtered::Redirect(r)) => redirect = Some(r),
            Some(Filtered::Rewrite(host, path)) => {
                out.rewrite_host = host;
                out.rewrite_path = path;
            }
            Some(Filtered::Mirror(to, numerator, denominator)) => {
                mirrors.push((to, numerator, denominator));
            }
            Some(Filtered::Extension(why)) => {
                extension.get_or_insert(why);
            }
            Some(Filtered::Cors(c)) => out.cors = Some(c),
            None => {}
        }
    }
    if let Some(t) = &rule.timeouts {
        out.request_timeout = t
            .request
            .as_deref()
            .map(gateway_duration)
            .transpose()?
            .flatten();
        out.backend_timeout = t
            .backend_request
            .as_deref()
            .map(gateway_duration)
            .transpose()?
            .flatten();
    }
    Ok(Asked {
        redirect,
        mirrors,
        extension,
    })
}

/// A backendRef's filters: its request and response header changes, and an `ExtensionRef`'s
/// why.
pub(super) type BackendFilters = (HeaderFilter, HeaderFilter, Option<String>);

/// Each backendRef's filters, read before any backend is resolved.
fn backend_filters(rule: &HTTPRouteRule) -> Result<Vec<BackendFilters>, String> {
    let mut backend_filters = Vec::with_capacity(rule.backend_refs.len());
    for b in &rule.backend_refs {
        let mut request_headers = HeaderFilter::default();
        let mut response_headers = HeaderFilter::default();
        let mut extension = None;
        for f in &b.filters {
            match filter(f, &mut request_headers, &mut response_headers)? {
                None => {}
                Some(Filtered::Extension(why)) => {
                    extension.get_or_insert(why);
                }
                Some(_) => {
                    return Err(format!(
                        "filter {} on a backendRef is not supported",
                        f.type_
                    ));
                }
            }
        }
        backend_filters.push((request_headers, response_headers, extension));
    }
    Ok(backend_filters)
}

/// The regular expressions of one build: the previous table's, reused by source (indexed
/// on the first pattern asked for, so a build without any walks nothing), and those
/// compiled so far; and those known not to compile (the previous build's failures, and
/// this one's), which are not tried again: a failure depends on the source alone.
pub(super) struct PatternSource<'p> {
    previous: Option<&'p GatewayRoutes>,
    known: Option<Patterns>,
    failed_before: Option<&'p HashMap<Box<str>, PatternError>>,
    /// Failures asked for in this build, for the next one.
    pub(super) failed: HashMap<Box<str>, PatternError>,
    /// Patterns that failed to compile in this build.
    pub(super) failures_compiled: usize,
}

impl<'p> PatternSource<'p> {
    /// Those of a build after `previous` (and its cache), none compiled yet.
    pub(super) fn new(
        previous: Option<&'p GatewayRoutes>,
        previous_cache: Option<&'p RouteCache>,
    ) -> Self {
        PatternSource {
            previous,
            known: None,
            failed_before: previous_cache.map(|c| &c.failed),
            failed: HashMap::default(),
            failures_compiled: 0,
        }
    }

    fn get(&mut self, source: &str) -> Result<Pattern, PatternError> {
        if let Some(e) = self.failed.get(source) {
            return Err(e.clone());
        }
        if let Some(e) = self.failed_before.and_then(|f| f.get(source)) {
            self.failed.insert(source.into(), e.clone());
            return Err(e.clone());
        }
        let previous = self.previous;
        let got = self
            .known
            .get_or_insert_with(|| {
                Patterns::from_previous(previous.into_iter().flat_map(|g| g.patterns()))
            })
            .get(source);
        if let Err(e) = &got {
            self.failures_compiled += 1;
            self.failed.insert(source.into(), e.clone());
        }
        got
    }
}

/// Why a header or query match cannot be served.
enum Unusable {
    /// A match type switchyard does not know: that match is skipped.
    Type(String),
    /// A regular expression that does not compile or is too large: its rule is dropped.
    Pattern(String),
}

/// Header or query matches as the table holds them (`what` names them in messages).
fn value_matches(
    list: &[HTTPHeaderMatch],
    fold: bool,
    what: &str,
    compiled: &mut PatternSource<'_>,
) -> Result<Box<[ValueMatch]>, Unusable> {
    list.iter()
        .map(|m| {
            let regex = match m.type_.as_deref() {
                None | Some("Exact") => None,
                Some("RegularExpression") => {
                    Some(Box::new(compiled.get(&m.value).map_err(|e| {
                        Unusable::Pattern(format!(
                            "{what} {} regular expression {} {e}",
                            show(&m.name),
                            show(&m.value)
                        ))
                    })?))
                }
                Some(other) => {
                    return Err(Unusable::Type(format!(
                        "{what} match type {} is not supported",
                        show(other)
                    )));
                }
            };
            Ok(ValueMatch {
                name: if fold {
                    m.name.to_ascii_lowercase().into()
                } else {
                    m.name.as_str().into()
                },
                value: m.value.as_str().into(),
                regex,
            })
        })
        .collect()
}

/// Filters the spec says a rule may not hold together (the CRD's validations, which an API
/// server enforces but `--manifests` files and older CRDs do not): `RequestRedirect` with
/// `URLRewrite` or with `backendRefs`, and any filter but `RequestMirror` and `ExtensionRef`
/// twice, in the rule's list or in one backendRef's. `None`: compatible.
fn incompatible_filters(rule: &HTTPRouteRule) -> Option<String> {
    let repeated = |filters: &[HTTPRouteFilter]| {
        filters.iter().enumerate().find_map(|(i, f)| {
            let once = !matches!(f.type_.as_str(), "RequestMirror" | "ExtensionRef");
            (once && filters[..i].iter().any(|g| g.type_ == f.type_))
                .then(|| format!("filter {} may not be repeated", f.type_))
        })
    };
    let has = |t: &str| rule.filters.iter().any(|f| f.type_ == t);
    if has("RequestRedirect") && has("URLRewrite") {
        return Some("RequestRedirect and URLRewrite filters may not be combined".into());
    }
    if has("RequestRedirect") && !rule.backend_refs.is_empty() {
        return Some("a RequestRedirect filter may not be used together with backendRefs".into());
    }
    repeated(&rule.filters).or_else(|| {
        rule.backend_refs
            .iter()
            .find_map(|b| repeated(&b.filters).map(|why| format!("{why} (on a backendRef)")))
    })
}

/// Whether a rule's rewrite or redirect replaces the matched prefix.
fn replaces_prefix(rule: &HTTPRouteRule) -> bool {
    rule.filters.iter().any(|f| {
        let path = f
            .url_rewrite
            .as_ref()
            .and_then(|r| r.path.as_ref())
            .into_iter()
            .chain(f.request_redirect.as_ref().and_then(|r| r.path.as_ref()));
        path.into_iter().any(|p| p.type_ == "ReplacePrefixMatch")
    })
}

/// What a filter asks beyond header changes.
enum Filtered {
    Redirect(Redirect),
    Rewrite(Option<Arc<str>>, Option<PathRewrite>),
    /// A backend and the share of requests it gets a copy of (numerator, denominator).
    Mirror(BackendObjectReference, u64, u64),
    /// An `ExtensionRef`, which switchyard never resolves: why, for `ResolvedRefs`.
    Extension(String),
    Cors(Arc<Cors>),
}

/// Reads one filter: header modifiers into `req` / `resp`; a redirect, a rewrite, a mirror
/// or an extension returned; `Err` for a filter switchyard does not offer.
fn filter(
    f: &HTTPRouteFilter,
    req: &mut HeaderFilter,
    resp: &mut HeaderFilter,
) -> Result<Option<Filtered>, String> {
    let headers = |into: &mut HeaderFilter, h: &Option<HTTPHeaderFilter>| {
        if let Some(h) = h {
            let lower = |n: &str| -> Box<str> { n.to_ascii_lowercase().into() };
            into.set.extend(
                h.set
                    .iter()
                    .map(|x| (lower(&x.name), x.value.as_str().into())),
            );
            into.add.extend(
                h.add
                    .iter()
                    .map(|x| (lower(&x.name), x.value.as_str().into())),
            );
            into.remove.extend(h.remove.iter().map(|n| lower(n)));
        }
    };
    match f.type_.as_str() {
        "RequestHeaderModifier" => headers(req, &f.request_header_modifier),
        "ResponseHeaderModifier" => headers(resp, &f.response_header_modifier),
        "RequestRedirect" => {
            let Some(r) = &f.request_redirect else {
                return Err("RequestRedirect filter without requestRedirect".into());
            };
            let status = match r.status_code.unwrap_or(302) {
                s @ (301 | 302 | 303 | 307 | 308) => s as u16,
                other => return Err(format!("redirect status {other} is not supported")),
            };
            return Ok(Some(Filtered::Redirect(Redirect {
                scheme: r.scheme.as_deref().map(|s| s.to_ascii_lowercase().into()),
                hostname: r.hostname.as_deref().map(Into::into),
                port: r.port.and_then(|p| u16::try_from(p).ok()),
                path: r.path.as_ref().map(path_modifier).transpose()?,
                status,
            })));
        }
        "URLRewrite" => {
            let Some(r) = &f.url_rewrite else {
                return Err("URLRewrite filter without urlRewrite".into());
            };
            return Ok(Some(Filtered::Rewrite(
                r.hostname.as_deref().map(Arc::from),
                r.path.as_ref().map(path_modifier).transpose()?,
            )));
        }
        "RequestMirror" => {
            let Some(m) = &f.request_mirror else {
                return Err("RequestMirror filter without requestMirror".into());
            };
            let (numerator, denominator) = match (m.percent, &m.fraction) {
                (Some(p), _) => (p, 100),
                (None, Some(f)) => (f.numerator, f.denominator.unwrap_or(100)),
                (None, None) => (100, 100),
            };
            let share = |v: i32| u64::try_from(v).ok();
            let (Some(numerator), Some(denominator)) = (share(numerator), share(denominator))
            else {
                return Err("RequestMirror share is negative".into());
            };
            if denominator == 0 {
                return Err("RequestMirror fraction has denominator 0".into());
            }
            return Ok(Some(Filtered::Mirror(
                m.backend_ref.clone(),
                numerator.min(denominator),
                denominator,
            )));
        }
        "ExtensionRef" => {
            let Some(e) = &f.extension_ref else {
                return Err("ExtensionRef filter without extensionRef".into());
            };
            return Ok(Some(Filtered::Extension(format!(
                "filter ExtensionRef {} {}/{}: switchyard resolves no extension, its requests \
                 are answered 500",
                show(&e.group),
                e.kind,
                e.name
            ))));
        }
        "CORS" => {
            let Some(c) = &f.cors else {
                return Err("CORS filter without cors".into());
            };
            return cors_filter(c).map(|c| Some(Filtered::Cors(Arc::new(c))));
        }
        other => return Err(format!("filter {other} is not supported")),
    }
    Ok(None)
}

/// The `CORS` filter, with the Gateway API's defaults (no credentials, `maxAge` 5 s).
fn cors_filter(c: &HTTPCORSFilter) -> Result<Cors, String> {
    let origins = if c.allow_origins.iter().any(|o| o == "*") {
        Origins::Any
    } else {
        let mut list = Vec::with_capacity(c.allow_origins.len());
        for o in &c.allow_origins {
            list.push(
                Cors::parse_origin(o).map_err(|why| format!("CORS origin {} {why}", show(o)))?,
            );
        }
        Origins::List(list)
    };
    let names = |v: &[String]| -> Box<str> {
        if v.iter().any(|n| n == "*") {
            "*".into()
        } else {
            v.join(", ").into()
        }
    };
    let max_age = c.max_age.unwrap_or(5);
    if max_age < 0 {
        return Err(format!("CORS maxAge {max_age} is negative"));
    }
    Ok(Cors {
        flavor: CorsFlavor::Gateway,
        origins,
        methods: names(&c.allow_methods),
        headers: names(&c.allow_headers),
        expose: names(&c.expose_headers),
        credentials: c.allow_credentials.unwrap_or(false),
        max_age: max_age.to_string().into(),
    })
}

fn path_modifier(p: &HTTPPathModifier) -> Result<PathRewrite, String> {
    match (
        p.type_.as_str(),
        &p.replace_full_path,
        &p.replace_prefix_match,
    ) {
        ("ReplaceFullPath", Some(v), _) => Ok(PathRewrite::Full(Arc::from(v.as_str()))),
        ("ReplacePrefixMatch", _, Some(v)) => Ok(PathRewrite::Prefix(Arc::from(v.as_str()))),
        (t, _, _) => Err(format!("path modifier {} without its value", show(t))),
    }
}

/// A Gateway API duration (`1h2m3s4ms`: up to four parts); `None` for zero (no timeout).
fn gateway_duration(v: &str) -> Result<Option<Duration>, String> {
    let bad = || format!("timeout {} is not a Gateway API duration", show(v));
    let mut total = Duration::ZERO;
    let mut rest = v;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(n), 2)
        } else if rest.starts_with('h') {
            (Duration::from_secs(n * 3600), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(n * 60), 1)
        } else if rest.starts_with('s') {
            (Duration::from_secs(n), 1)
        } else {
            return Err(bad());
        };
        total += unit;
        rest = &rest[len..];
        parts += 1;
    }
    if parts == 0 || parts > 4 {
        return Err(bad());
    }
    Ok((!total.is_zero()).then_some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_the_gateway_api_format() {
        assert_eq!(gateway_duration("10s"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(
            gateway_duration("1h2m3s4ms"),
            Ok(Some(Duration::from_millis(3_723_004)))
        );
        assert_eq!(
            gateway_duration("500ms"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(gateway_duration("0s"), Ok(None));
        assert!(gateway_duration("1.5s").is_err());
        assert!(gateway_duration("10").is_err());
        assert!(gateway_duration("1h1m1s1ms1h").is_err());
    }
}
