//! The full build: entries, routes and their conflicts, TCP frontends and warnings, with
//! per-endpoint state carried over from the previous table by key. Pure.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::annotations::{AclPrefix, Settings, asks_for_routes, settings, show};
use super::endpoints::endpoint_addrs;
use super::gateway::api::GatewayApiStatus;
use super::gateway::backend_tls::BackendTlsPolicies;
use super::gateway::cache::RouteCache;
use super::inputs::{meta_key, object};
use super::memo::{Built, Memo, MemoInputs, ServiceMemo, options_fingerprint, version_fingerprint};
use super::trust::Trust;
use super::view::*;
use crate::table::client_validation::{
    ClientValidation, ClientValidations, IngressHosts, ListenerKey,
};
use crate::table::gateway::GatewayRoutes;
use crate::table::matcher::{HostPattern, PathRule, PathRules, Router};
use crate::table::passthrough::Passthrough;
use crate::table::pattern::{Pattern, Patterns};
use crate::table::policy::{Canary, RoutePolicy};
use crate::table::rate_limit::RateLimit;
use crate::table::stream::Streams;
use crate::table::upstream::{BackendProtocol, CaBundle, Upstream};
use crate::table::{
    Endpoint, EndpointState, Entry, EntryId, EntryKey, EntryState, Frontend, RoutingTable, Shared,
    TcpFrontend,
};

/// Where a route lives: frontend, host level, prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct RouteKey {
    pub(super) frontend: Frontend,
    pub(super) host: Option<HostPattern>,
    /// Lower case when `ignore_case`.
    pub(super) prefix: String,
    pub(super) ignore_case: bool,
    /// The whole path only (an Ingress `Exact` path).
    pub(super) exact: bool,
    /// `prefix` is an ingress-nginx regular-expression path (its claims carry the pattern).
    pub(super) regex: bool,
}

/// A claim on a route key. A Service's claims come first (its own path route before its
/// annotations'), then Ingresses' by age and key; among a Service's, the entry's `EntryKey`
/// orders them.
pub(super) struct RouteClaim {
    pub(super) entry: EntryId,
    pub(super) strip: bool,
    /// The Ingress that made this claim (`None`: a Service's annotations).
    pub(super) ingress: Option<Arc<IngressRef>>,
    /// What the Ingress adds to the route's requests.
    pub(super) policy: Option<u32>,
    /// Made for another host than the rule's (`server-alias`, `from-to-www-redirect`): it
    /// yields, silently, to any other claim, and a host that any other claim names is that
    /// claim's alone (as ingress-nginx's server for a host beats another's alias of it).
    pub(super) alias: bool,
    /// The compiled regular-expression path (`RouteKey::regex`).
    pub(super) pattern: Option<Pattern>,
}

/// A canary Ingress's path, offered to the main route of the same key.
pub(super) type CanaryOffer = (Arc<IngressRef>, Arc<Canary>);

/// An Ingress as claims name it, ordered as conflicts between Ingresses are settled: the
/// oldest first (as ingress-nginx does), then by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct IngressRef {
    /// `metadata.creationTimestamp` in RFC 3339 (sorts as time); `None` sorts first.
    pub(super) created: Option<String>,
    pub(super) namespace: String,
    pub(super) name: String,
}

pub(super) struct Builder<'a> {
    pub(super) options: &'a Options,
    pub(super) prev_endpoints: HashMap<SocketAddr, Shared<EndpointState>>,
    /// A build without a previous table: each endpoint gets a state of its own at once, and
    /// `finish` makes the endpoints of a repeated address share one (`share_repeated_states`)
    /// instead of every endpoint probing `prev_endpoints` (that probe, into a map as large as
    /// the cluster, and the reference-count increment into fresh memory were a third of a
    /// cold build).
    pub(super) fresh_states: bool,
    pub(super) prev_entries: HashMap<EntryKey, Shared<EntryState>>,
    pub(super) entries: Vec<Entry>,
    // Hash maps: the order routes are inserted in does not matter (conflicts are resolved by
    // entry key, warnings sorted at the end), and tens of thousands of long, alike prefixes make
    // an ordered map spend its time in string comparisons.
    pub(super) routes: HashMap<RouteKey, Vec<RouteClaim>>,
    pub(super) tcp: BTreeMap<u16, Vec<EntryId>>,
    pub(super) warnings: Vec<Warning>,
    pub(super) memo: Vec<Arc<ServiceMemo>>,
    /// EndpointSlice key -> index in `memo` of its Service.
    pub(super) owner: HashMap<Arc<ObjectKey>, u32>,
    /// See `Memo::keyed`.
    pub(super) keyed: bool,
    /// Ingress route policies, by index.
    pub(super) policies: Vec<crate::table::policy::RoutePolicy>,
    /// Certificates from Secrets that served Ingresses (and Gateways without an address of
    /// their own) name, by Secret.
    pub(super) certificates: Certificates,
    /// Certificates of the Gateways with an address of their own, by that address.
    pub(super) address_certificates: BTreeMap<IpAddr, Certificates>,
    /// The Gateway HTTPS listeners that verify client certificates, the winner of a key first.
    pub(super) client_validations: Vec<(ListenerKey, Arc<ClientValidation>)>,
    /// Ingress hosts that verify client certificates (`auth-tls-*`), the winner first.
    pub(super) ingress_client_validations: Vec<(Box<str>, Arc<ClientValidation>)>,
    /// Ingresses served, and Services that have entries only because an Ingress names them.
    pub(super) served_ingresses: BTreeSet<ObjectKey>,
    /// Ingresses left to other controllers (their class is not switchyard's).
    pub(super) other_class_ingresses: usize,
    pub(super) gateway_status: GatewayApiStatus,
    pub(super) gateway_routes: GatewayRoutes,
    /// Entry ids by key, as the Gateway build resolved its backends (for the next
    /// Gateway-only build).
    pub(super) entry_index: Option<Arc<EntryIndex>>,
    /// A Gateway-only build: the entries are the previous table's, by this index; none may
    /// be added (`needs_full` is set instead).
    pub(super) frozen: Option<(Arc<EntryIndex>, &'a [Arc<Entry>])>,
    pub(super) needs_full: bool,
    /// What the Gateway build kept of each route's translation (for the next build).
    pub(super) gateway_cache: Option<Arc<RouteCache>>,
    pub(super) ingress_only: BTreeSet<ObjectKey>,
    /// The Secrets and ConfigMaps a Service's CA bundle annotations may name.
    pub(super) trust: Trust<'a>,
    /// Hosts whose Ingress paths are regular expressions (ingress-nginx's `use-regex`).
    pub(super) regex_hosts: HashSet<Option<HostPattern>>,
    /// The replicas an Ingress's request limits are shared by (`--limit-scope cluster`: the
    /// ready endpoints of `--limit-peers`; 1 otherwise).
    pub(super) replicas: u32,
    /// Ingress regular-expression paths: the previous table's, and those compiled so far.
    pub(super) patterns: Patterns,
    /// Canary Ingresses' offers, by the route key of the main route they join.
    pub(super) canaries: HashMap<RouteKey, Vec<CanaryOffer>>,
    /// The previous table's request limits, by the Ingress they belong to: an unchanged
    /// limit keeps counting where it was.
    pub(super) prev_limits: HashMap<Box<str>, Arc<RateLimit>>,
    /// Hosts relayed unterminated on the TLS port (`ssl-passthrough`).
    pub(super) passthrough: Vec<Passthrough>,
    /// The Gateways' TCP and TLS listeners with their routes.
    pub(super) streams: Streams,
    /// BackendTLSPolicies by the Service ports they target.
    pub(super) backend_tls: BackendTlsPolicies,
}

impl<'a> Builder<'a> {
    pub(super) fn new(options: &'a Options, previous: Option<&RoutingTable>) -> Self {
        let mut prev_endpoints = HashMap::default();
        let mut prev_entries = HashMap::default();
        if let Some(prev) = previous {
            for e in &prev.entries {
                prev_entries.insert(e.key.clone(), e.state.clone());
                for ep in &e.endpoints {
                    prev_endpoints.insert(ep.addr, ep.state.clone());
                }
            }
        }
        Builder {
            options,
            prev_endpoints,
            prev_entries,
            fresh_states: false,
            entries: Vec::new(),
            routes: HashMap::default(),
            tcp: BTreeMap::new(),
            warnings: Vec::new(),
            memo: Vec::new(),
            owner: HashMap::default(),
            keyed: false,
            policies: Vec::new(),
            certificates: BTreeMap::new(),
            address_certificates: BTreeMap::new(),
            client_validations: Vec::new(),
            ingress_client_validations: Vec::new(),
            served_ingresses: BTreeSet::new(),
            other_class_ingresses: 0,
            gateway_status: GatewayApiStatus::default(),
            gateway_routes: GatewayRoutes::default(),
            entry_index: None,
            frozen: None,
            needs_full: false,
            gateway_cache: None,
            ingress_only: BTreeSet::new(),
            trust: Trust::default(),
            regex_hosts: HashSet::new(),
            replicas: 1,
            canaries: HashMap::default(),
            passthrough: Vec::new(),
            streams: Streams::default(),
            backend_tls: BackendTlsPolicies::default(),
            prev_limits: previous
                .into_iter()
                .flat_map(|p| p.policies.iter())
                .filter_map(|p| Some((p.origin.clone(), Arc::clone(p.rate_limit.as_ref()?))))
                .collect(),
            patterns: Patterns::from_previous(
                previous
                    .into_iter()
                    .flat_map(|p| p.http.levels())
                    .flat_map(|rules| rules.iter())
                    .filter_map(|rule| rule.regex.as_deref()),
            ),
        }
    }

    /// Whether `--namespace` leaves objects of namespace `ns` out.
    pub(super) fn outside_namespace(&self, ns: &str) -> bool {
        self.options
            .only_namespace
            .as_deref()
            .is_some_and(|only| only != ns)
    }

    /// The entries built so far, by key.
    pub(super) fn entry_ids(&self) -> HashMap<EntryKey, EntryId> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.key.clone(), EntryId::try_from(i).unwrap_or(EntryId::MAX)))
            .collect()
    }

    /// A builder for one Service whose state comes from its own previous entries only.
    pub(super) fn new_scoped(options: &'a Options, prev_entries: &[Arc<Entry>]) -> Self {
        let mut b = Builder::new(options, None);
        for e in prev_entries {
            b.prev_entries.insert(e.key.clone(), e.state.clone());
            for ep in &e.endpoints {
                b.prev_endpoints.insert(ep.addr, ep.state.clone());
            }
        }
        b
    }

    /// Records what `svc` contributed (entries from `first`, warnings from `warnings_before`).
    pub(super) fn remember(
        &mut self,
        svc: &Service,
        slices: &[&EndpointSlice],
        first: usize,
        warnings_before: usize,
    ) {
        let (ns, name) = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        self.keyed &= svc
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|n| !n.is_empty());
        let slot = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
        let mut keys = Vec::with_capacity(slices.len());
        for s in slices {
            let (sns, sname) = meta_key(&s.metadata.namespace, &s.metadata.name);
            let key = Arc::new((sns.to_string(), sname.to_string()));
            // The same slice key twice: keys no longer name one object each.
            self.keyed &= self.owner.insert(Arc::clone(&key), slot).is_none();
            keys.push((key, version_fingerprint(&s.metadata)));
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.memo.push(Arc::new(ServiceMemo {
            key: (ns.to_string(), name.to_string()),
            version: version_fingerprint(&svc.metadata),
            slices: keys,
            first,
            count: self.entries.len() - first,
            warnings: self.warnings[warnings_before..].to_vec(),
        }));
    }

    pub(super) fn skip(&mut self, who: &ObjectRef, message: String) {
        self.warnings.push(Warning {
            object: who.clone(),
            reason: WarningReason::Skipped,
            message,
        });
    }

    pub(super) fn add_service(&mut self, svc: &Service, slices: &[&EndpointSlice]) {
        let (ns, name) = meta_key(&svc.metadata.namespace, &svc.metadata.name);
        if self
            .options
            .only_namespace
            .as_deref()
            .is_some_and(|only| only != ns)
        {
            return;
        }
        if let Some(target) = &self.options.target_service {
            let wanted = match target.split_once('/') {
                Some((tns, tname)) => tns == ns && tname == name,
                None => target == name,
            };
            if !wanted {
                return;
            }
        }
        let asked_for = self.options.target_service.is_some();
        // A Service no one asked to route gets no entry of its own, and no warning either
        // (a cluster has many): an Ingress or a Gateway route that names it makes its entry.
        let routed = asked_for
            || asks_for_routes(svc).unwrap_or(match self.options.service_routes {
                ServiceRoutes::All => true,
                ServiceRoutes::Namespace => ns == self.options.home_namespace,
                ServiceRoutes::Annotated => false,
            });
        let tcp_port = |sp: &ServicePort| {
            u16::try_from(sp.port).is_ok_and(|port| {
                self.options
                    .tcp_services
                    .iter()
                    .any(|t| t.matches(ns, name, port))
            })
        };
        let ports = svc.spec.as_ref().and_then(|s| s.ports.as_deref());
        let who = object("Service", ns, name);
        if !routed && !ports.unwrap_or(&[]).iter().any(tcp_port) {
            // Its own annotations are still read for their warnings (a typo in `lb.expose`
            // is why it is not routed); an Ingress that names it reads them again, and the
            // duplicates go in `finish`.
            let annotated = svc
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.keys().any(|k| k.starts_with(annotation::PREFIX)));
            if annotated {
                self.service_settings(svc, &who);
            }
            return;
        }
        if (ns, name) == ("default", "kubernetes")
            && !self.options.serve_kubernetes_service
            && !asked_for
        {
            let why = "the API server's own Service; --serve-kubernetes-service serves it";
            return self.skip(&who, why.into());
        }
        let spec = svc.spec.as_ref();
        match spec.and_then(|s| s.type_.as_deref()) {
            Some("LoadBalancer") => {
                return self.skip(&who, "type LoadBalancer already has a load balancer".into());
            }
            Some("ExternalName") => {
                return self.skip(&who, "type ExternalName has no endpoints to balance".into());
            }
            _ => {}
        }
        let settings = self.service_settings(svc, &who);
        for sp in spec.and_then(|s| s.ports.as_deref()).unwrap_or(&[]) {
            if !routed && !tcp_port(sp) {
                continue;
            }
            let protocol = sp.protocol.as_deref().unwrap_or("TCP");
            if protocol != "TCP" {
                self.skip(
                    &who,
                    format!("port {} is {protocol}; only TCP is served", sp.port),
                );
                continue;
            }
            let Ok(port) = u16::try_from(sp.port) else {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidObject,
                    message: format!("port {} is out of range", sp.port),
                });
                continue;
            };
            self.add_port(svc, &who, &settings, sp, port, slices, true);
        }
    }

    /// A Service's settings, its CA bundle reference resolved: an unresolved one is a warning
    /// and stays in the settings without a bundle, so that its TLS connections fail closed.
    pub(super) fn service_settings(&mut self, svc: &Service, who: &ObjectRef) -> Settings {
        let mut s = settings(svc, self.options, who, &mut self.warnings);
        if let Some((kind, name)) = &s.backend_ca_object {
            let pem = match self.trust.ca_pem(kind, &who.namespace, name) {
                Ok(pem) => Some(pem),
                Err(why) => {
                    let key = if *kind == "Secret" {
                        annotation::BACKEND_CA_SECRET
                    } else {
                        annotation::BACKEND_CA_CONFIGMAP
                    };
                    self.warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::InvalidAnnotation,
                        message: format!(
                            "{key}: {kind} {}/{} {why}; TLS connections to its endpoints fail \
                             until it holds a CA certificate",
                            who.namespace,
                            show(name)
                        ),
                    });
                    None
                }
            };
            s.backend_ca = Some(CaBundle {
                kind,
                namespace: who.namespace.as_str().into(),
                name: name.as_str().into(),
                pem,
            });
        }
        s
    }

    /// Adds the entry of one Service port and, with `own_routes`, the routes its annotations
    /// (or its name) give it; an Ingress's backend gets its entry without them.
    // The facts of one port, each already at hand where this is called.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_port(
        &mut self,
        svc: &Service,
        who: &ObjectRef,
        s: &Settings,
        sp: &ServicePort,
        port: u16,
        slices: &[&EndpointSlice],
        own_routes: bool,
    ) {
        let (ns, name) = (who.namespace.as_str(), who.name.as_str());
        let key = EntryKey {
            namespace: ns.to_string(),
            service: name.to_string(),
            port,
        };
        let addrs = if self.options.forward_services {
            self.cluster_ip_endpoint(svc, who, port)
                .into_iter()
                .map(|a| (a, false))
                .collect()
        } else {
            endpoint_addrs(sp, slices, &mut self.warnings)
        };
        let endpoints = addrs
            .into_iter()
            .map(|(addr, draining)| {
                // Inserting a new address's state makes every entry of this build that uses the
                // address share it, as later builds do (health checks rely on one per address);
                // a cold build shares them in `finish` instead.
                let state = if self.fresh_states {
                    Shared::default()
                } else {
                    self.prev_endpoints.entry(addr).or_default().clone()
                };
                Endpoint {
                    draining,
                    ..Endpoint::new(addr, state)
                }
            })
            .collect();
        let entry_name = entry_name(
            (ns != self.options.home_namespace).then_some(ns),
            name,
            port,
        );
        let is_tcp = self
            .options
            .tcp_services
            .iter()
            .any(|t| t.matches(ns, name, port));
        let frontend = if is_tcp {
            Frontend::Tcp(port)
        } else if s.ssl_term {
            Frontend::Https
        } else {
            Frontend::Http
        };
        let id = EntryId::try_from(self.entries.len()).unwrap_or(EntryId::MAX);
        // Routes first, so that the name and key move into the entry instead of being copied.
        if is_tcp && own_routes {
            self.tcp.entry(port).or_default().push(id);
        } else if own_routes {
            // Each host (or any host) with each aclMatch prefix (or `/`); without either, the
            // path route `/<entry name>`, stripped.
            let hosts: Vec<Option<&HostPattern>> = if s.hosts.is_empty() {
                vec![None]
            } else {
                s.hosts.iter().map(Some).collect()
            };
            let path_route = s.hosts.is_empty() && s.acl.is_empty();
            let prefixes: Vec<AclPrefix> = if path_route {
                let mut prefix = String::with_capacity(entry_name.len() + 1);
                prefix.push('/');
                prefix.push_str(&entry_name);
                vec![AclPrefix {
                    prefix,
                    ignore_case: false,
                }]
            } else if s.acl.is_empty() {
                vec![AclPrefix {
                    prefix: "/".into(),
                    ignore_case: false,
                }]
            } else {
                s.acl.clone()
            };
            for host in hosts {
                for p in &prefixes {
                    let rk = RouteKey {
                        frontend,
                        host: host.cloned(),
                        prefix: p.prefix.clone(),
                        ignore_case: p.ignore_case,
                        exact: false,
                        regex: false,
                    };
                    self.routes.entry(rk).or_default().push(RouteClaim {
                        entry: id,
                        strip: path_route,
                        ingress: None,
                        policy: None,
                        alias: false,
                        pattern: None,
                    });
                }
            }
        }
        let upstream = self.upstream(who, s, sp, is_tcp);
        let mut check = s.check.clone();
        // Checks speak the port's protocol (HTTP/1 or HTTP/2, clear or TLS); gRPC needs HTTP/2.
        if !upstream.protocol.http2() && check.grpc.is_some() {
            // (A TCP port relays bytes: its check is a connect, said nothing about protocols.)
            if !is_tcp {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidAnnotation,
                    message: format!(
                        "port {}: {} needs an HTTP/2 backend (appProtocol or {} grpc, grpcs, h2c, \
                     h2), not {}; no gRPC health check",
                        sp.port,
                        annotation::CHECK_GRPC,
                        annotation::BACKEND_PROTOCOL,
                        upstream.protocol.label()
                    ),
                });
            }
            check.grpc = None;
        }
        self.entries.push(Entry {
            name: entry_name.into(),
            state: self.prev_entries.get(&key).cloned().unwrap_or_default(),
            key,
            frontend,
            algorithm: s.algorithm,
            // Cookies are an HTTP feature; on a TCP frontend client-IP affinity is what applies.
            cookie_sticky: s.cookie_sticky && !is_tcp,
            client_ip_affinity: s.affinity,
            maxconn: s.maxconn,
            endpoints,
            check,
            upstream,
        });
    }

    /// The protocol to this port's endpoints: the `lb.backend-protocol` annotation, else the
    /// port's `appProtocol`, else HTTP/1; with TLS, the server name and verification.
    fn upstream(
        &mut self,
        who: &ObjectRef,
        s: &Settings,
        sp: &ServicePort,
        is_tcp: bool,
    ) -> Upstream {
        if is_tcp {
            return Upstream {
                send_proxy: s.send_proxy,
                ..Upstream::default()
            };
        }
        if s.send_proxy {
            self.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InvalidAnnotation,
                message: format!(
                    "port {}: {} applies to TCP services (--tcp-services) only; ignored",
                    sp.port,
                    annotation::SEND_PROXY
                ),
            });
        }
        let protocol = s.backend_protocol.unwrap_or_else(|| {
            let Some(app) = sp.app_protocol.as_deref() else {
                return BackendProtocol::Http;
            };
            BackendProtocol::parse(app).unwrap_or_else(|| {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidObject,
                    message: format!(
                        "port {} appProtocol {} is not one switchyard speaks to backends \
                         (http, h2c, https, h2, grpc, grpcs, kubernetes.io/h2c, kubernetes.io/ws, \
                         kubernetes.io/wss); using HTTP/1",
                        sp.port,
                        show(app)
                    ),
                });
                BackendProtocol::Http
            })
        });
        if let Some(policy) =
            self.backend_tls
                .for_port(&who.namespace, &who.name, sp.name.as_deref())
        {
            // A BackendTLSPolicy: TLS, its name, its trust, verified whatever the annotations
            // say (`backend_tls.rs`).
            return Upstream {
                protocol: protocol.over_tls(),
                sni: policy.sni.clone(),
                verify: true,
                send_proxy: false,
                ca_file: None,
                ca_bundle: policy.ca.clone(),
                client_cert: s
                    .backend_client_cert
                    .as_ref()
                    .map(|(c, k)| (c.as_str().into(), k.as_str().into())),
                subject_alt_names: policy.subject_alt_names.clone(),
            };
        }
        if protocol.tls() && s.skip_verify {
            self.warnings.push(Warning {
                object: who.clone(),
                reason: WarningReason::InsecureBackend,
                message: format!(
                    "port {}: TLS to the endpoints without verifying their certificates \
                     ({} is set)",
                    sp.port,
                    annotation::BACKEND_SKIP_VERIFY
                ),
            });
        }
        let sni = match &s.backend_sni {
            Some(name) => name.as_str().into(),
            None => format!("{}.{}.svc", who.name, who.namespace).into(),
        };
        Upstream {
            protocol,
            sni,
            verify: !s.skip_verify,
            send_proxy: false,
            ca_file: s
                .backend_ca_file
                .as_deref()
                .filter(|_| protocol.tls())
                .map(Into::into),
            ca_bundle: s.backend_ca.clone().filter(|_| protocol.tls()),
            client_cert: s
                .backend_client_cert
                .as_ref()
                .filter(|_| protocol.tls())
                .map(|(c, k)| (c.as_str().into(), k.as_str().into())),
            subject_alt_names: None,
        }
    }

    pub(super) fn cluster_ip_endpoint(
        &mut self,
        svc: &Service,
        who: &ObjectRef,
        port: u16,
    ) -> Vec<SocketAddr> {
        let ip = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
        match ip.map(str::parse::<IpAddr>) {
            Some(Ok(ip)) => vec![SocketAddr::new(ip, port)],
            _ => {
                self.warnings.push(Warning {
                    object: who.clone(),
                    reason: WarningReason::InvalidObject,
                    message: format!(
                        "--forward-services needs a clusterIP, found {}; no endpoints",
                        show(ip.unwrap_or(""))
                    ),
                });
                Vec::new()
            }
        }
    }

    pub(super) fn finish(mut self, inputs: MemoInputs) -> (Built, Vec<Warning>) {
        if self.fresh_states {
            share_repeated_states(&mut self.entries);
        }
        let route_warnings_from = self.warnings.len();
        let mut http = Router::default();
        let mut https = Router::default();
        // Wildcard suffix -> index in its router's list, so building stays linear.
        let mut wildcard_at: HashMap<(Frontend, String), usize> = HashMap::default();
        let mut routes = std::mem::take(&mut self.routes);
        let entries = &self.entries;
        let key_of = |id: EntryId| &entries[id as usize].key;
        // A Service's own path route wins its key over aclMatch claims of the same prefix,
        // then the lower entry key wins; Ingresses' claims come after every Service's, the
        // oldest Ingress first.
        let rank = |c: &RouteClaim| (c.alias, c.ingress.clone(), !c.strip, key_of(c.entry));
        // A host some claim names for itself is not another's alias.
        let own_hosts: HashSet<(Frontend, HostPattern)> = routes
            .iter()
            .filter(|(_, claims)| claims.iter().any(|c| !c.alias))
            .filter_map(|(rk, _)| rk.host.clone().map(|h| (rk.frontend, h)))
            .collect();
        routes.retain(|rk, claims| {
            if let Some(h) = &rk.host
                && own_hosts.contains(&(rk.frontend, h.clone()))
            {
                claims.retain(|c| !c.alias);
            }
            !claims.is_empty()
        });
        let lost: Vec<RouteKey> = {
            // Path routes by (frontend, prefix) -> their winner: each owns its subtree.
            let owners: HashMap<(Frontend, &str), EntryId> = routes
                .iter()
                .filter(|(rk, _)| rk.host.is_none() && !rk.ignore_case && !rk.exact && !rk.regex)
                .filter_map(|(rk, claims)| {
                    let best = claims.iter().min_by(|a, b| rank(a).cmp(&rank(b)))?;
                    (best.strip && best.ingress.is_none())
                        .then_some(((rk.frontend, rk.prefix.as_str()), best.entry))
                })
                .collect();
            let mut lost = Vec::new();
            for (rk, claims) in &routes {
                let Some((owner_prefix, owner)) = rk
                    .host
                    .is_none()
                    .then(|| subtree_owner(&owners, rk))
                    .flatten()
                else {
                    continue;
                };
                let ok = key_of(owner);
                for c in claims {
                    let lk = key_of(c.entry);
                    self.warnings.push(Warning {
                        object: claimant(c, lk),
                        reason: WarningReason::RouteConflict,
                        message: format!(
                            "{} claims {}{}{} inside {owner_prefix}, the path route of {ok}, \
                             which owns everything below it; not served",
                            claim_subject(c, lk),
                            if rk.exact { "exact path " } else { "" },
                            if rk.ignore_case { "-i " } else { "" },
                            rk.prefix,
                        ),
                    });
                }
                lost.push(rk.clone());
            }
            lost
        };
        for rk in &lost {
            routes.remove(rk);
        }
        // Regular-expression paths are tried in their order: the longest first, as
        // ingress-nginx writes its locations (ties by the rest of the key, so that the same
        // objects always give the same order).
        let (mut regex_routes, routes): (Vec<_>, Vec<_>) =
            routes.into_iter().partition(|(rk, _)| rk.regex);
        regex_routes
            .sort_by(|(a, _), (b, _)| b.prefix.len().cmp(&a.prefix.len()).then_with(|| a.cmp(b)));
        let mut canaries = std::mem::take(&mut self.canaries);
        let mut joined: BTreeSet<ObjectKey> = BTreeSet::new();
        for (rk, mut claims) in routes.into_iter().chain(regex_routes) {
            if claims.len() > 1 {
                claims.sort_by(|a, b| rank(a).cmp(&rank(b)));
            }
            let winner = &claims[0];
            for loser in &claims[1..] {
                let (lk, wk) = (key_of(loser.entry), key_of(winner.entry));
                let why = if winner.strip && !loser.strip && winner.ingress.is_none() {
                    " (its own path route)"
                } else {
                    ""
                };
                let who_wins = match &winner.ingress {
                    Some(i) => format!("Ingress {}/{}", i.namespace, i.name),
                    None => wk.to_string(),
                };
                self.warnings.push(Warning {
                    object: claimant(loser, lk),
                    reason: WarningReason::RouteConflict,
                    message: format!(
                        "{} claims {}{}{}{} which {who_wins} also claims{why}; {who_wins} wins",
                        claim_subject(loser, lk),
                        describe_host(&rk.host),
                        if rk.exact { " exact path " } else { "" },
                        if rk.ignore_case { "-i " } else { "" },
                        rk.prefix,
                    ),
                });
            }
            let policy = match canaries.remove(&rk) {
                None => winner.policy,
                Some(offers) => join_canary(
                    (&mut self.warnings, &mut self.policies),
                    &rk,
                    winner,
                    offers,
                    &mut joined,
                ),
            };
            let router = if rk.frontend == Frontend::Https {
                &mut https
            } else {
                &mut http
            };
            let rules: &mut PathRules<EntryId> = match &rk.host {
                None => &mut router.any_host,
                Some(HostPattern::Exact(h)) => router.exact.entry(h.as_str().into()).or_default(),
                Some(HostPattern::OneLabel(suffix)) => {
                    router.one_label.entry(suffix.as_str().into()).or_default()
                }
                Some(HostPattern::Wildcard(suffix)) => {
                    let i = *wildcard_at
                        .entry((rk.frontend, suffix.clone()))
                        .or_insert_with(|| {
                            router
                                .wildcard
                                .push((suffix.as_str().into(), PathRules::default()));
                            router.wildcard.len() - 1
                        });
                    &mut router.wildcard[i].1
                }
            };
            rules.insert(PathRule {
                prefix: rk.prefix.into(),
                strip: winner.strip,
                ignore_case: rk.ignore_case,
                exact: rk.exact,
                regex: winner.pattern.clone().map(Box::new),
                policy,
                target: winner.entry,
            });
        }
        http.finish();
        https.finish();
        // A canary is never the main route: one without a main Ingress's route is not served.
        let mut unjoined: Vec<_> = canaries.into_iter().collect();
        unjoined.sort_by(|(a, _), (b, _)| a.cmp(b));
        for (rk, offers) in unjoined {
            for (canary, _) in offers {
                self.warnings.push(Warning {
                    object: object("Ingress", &canary.namespace, &canary.name),
                    reason: WarningReason::NotServed,
                    message: format!(
                        "canary path {}{}{} has no main Ingress with the same host and path; \
                         a canary is never served as the main one: not served",
                        describe_host(&rk.host),
                        if rk.exact { " exact path " } else { "" },
                        rk.prefix,
                    ),
                });
            }
        }
        self.served_ingresses.extend(joined);

        let mut tcp = Vec::new();
        for (port, mut claims) in std::mem::take(&mut self.tcp) {
            claims.sort_by(|a, b| key_of(*a).cmp(key_of(*b)));
            let wk = key_of(claims[0]);
            for loser in &claims[1..] {
                let lk = key_of(*loser);
                self.warnings.push(Warning {
                    object: object("Service", &lk.namespace, &lk.service),
                    reason: WarningReason::RouteConflict,
                    message: format!("TCP port {port} is also claimed by {wk}; {wk} wins"),
                });
            }
            tcp.push(TcpFrontend {
                port,
                entry: claims[0],
            });
        }

        let mut unused: BTreeSet<ObjectKey> = inputs.unused.into_iter().collect();
        // A key both unused and fed came twice; the count catches the other repeats.
        let unused_len = unused.len();
        unused.retain(|k| !self.owner.contains_key(k) && !inputs.unserved.contains(k));
        let keyed = self.keyed
            && unused.len() == unused_len
            && unused.len() + self.owner.len() + inputs.unserved.len() == inputs.slice_count;
        let route_warnings = self.warnings[route_warnings_from..].to_vec();
        self.warnings.sort();
        self.warnings.dedup();
        let memo = Memo {
            options: options_fingerprint(self.options),
            keyed,
            services: std::mem::take(&mut self.memo),
            owner: Arc::new(std::mem::take(&mut self.owner)),
            unused: Arc::new(unused),
            unserved: Arc::new(inputs.unserved),
            slice_count: inputs.slice_count,
            input_warnings: inputs.input_warnings,
            ingress_warnings: inputs.ingress_warnings,
            route_warnings,
            all_warnings: Arc::new(self.warnings.clone()),
            served_ingresses: Arc::new(std::mem::take(&mut self.served_ingresses)),
            other_class_ingresses: self.other_class_ingresses,
            gateway_status: Arc::new(std::mem::take(&mut self.gateway_status)),
            gateway_warnings: inputs.gateway_warnings,
            ingress_certificates: inputs.ingress_certificates,
            entry_index: self.entry_index.take(),
            gateway_cache: self.gateway_cache.take(),
            ingress_only: Arc::new(std::mem::take(&mut self.ingress_only)),
        };
        let certificates = secret_certs(
            std::mem::take(&mut self.certificates),
            std::mem::take(&mut self.address_certificates),
        );
        let table = RoutingTable {
            generation: 0,
            entries: self.entries.into_iter().map(Arc::new).collect(),
            http: Arc::new(http),
            https: Arc::new(https),
            tcp,
            policies: Arc::new(self.policies),
            certificates: Arc::new(certificates),
            gateway: Arc::new(self.gateway_routes),
            passthrough: Arc::new(self.passthrough),
            streams: Arc::new(self.streams),
            client_validation: Arc::new(
                ClientValidations::new(self.client_validations)
                    .with_ingress_hosts(IngressHosts::new(self.ingress_client_validations)),
            ),
        };
        (Built { table, memo }, self.warnings)
    }
}

/// The policy of `winner`'s route with the oldest of `offers` as its canary (the others
/// are told), when the winner is an Ingress's; else the canaries are told they are not
/// served. `joined`: the canary Ingresses that got a route.
fn join_canary(
    (warnings, policies): (&mut Vec<Warning>, &mut Vec<RoutePolicy>),
    rk: &RouteKey,
    winner: &RouteClaim,
    mut offers: Vec<CanaryOffer>,
    joined: &mut BTreeSet<ObjectKey>,
) -> Option<u32> {
    offers.sort_by(|a, b| a.0.cmp(&b.0));
    let route = format!(
        "{}{}{}",
        describe_host(&rk.host),
        if rk.exact { " exact path " } else { "" },
        rk.prefix
    );
    let Some(main) = &winner.ingress else {
        for (canary, _) in &offers {
            warnings.push(Warning {
                object: object("Ingress", &canary.namespace, &canary.name),
                reason: WarningReason::NotServed,
                message: format!(
                    "canary path {route} belongs to a Service's annotations, not to an \
                     Ingress; not served"
                ),
            });
        }
        return winner.policy;
    };
    let (first, canary) = &offers[0];
    for (other, _) in &offers[1..] {
        warnings.push(Warning {
            object: object("Ingress", &other.namespace, &other.name),
            reason: WarningReason::RouteConflict,
            message: format!(
                "canary path {route} of Ingress {}/{} already has a canary, Ingress {}/{} \
                 (the oldest); not served",
                main.namespace, main.name, first.namespace, first.name
            ),
        });
    }
    joined.insert((first.namespace.clone(), first.name.clone()));
    let mut policy = winner
        .policy
        .and_then(|id| policies.get(id as usize))
        .cloned()
        .unwrap_or_else(|| RoutePolicy::of(&format!("{}/{}", main.namespace, main.name)));
    policy.canary = Some(Arc::clone(canary));
    let id = u32::try_from(policies.len()).unwrap_or(u32::MAX);
    policies.push(policy);
    Some(id)
}

/// Makes every endpoint of one address share one state, when each was given its own (a cold
/// build): the endpoints' address hashes, sorted, show which addresses repeat (usually none,
/// so the common case is one sort of a `u64` per endpoint and no map); only endpoints whose
/// hash repeats are looked up by address, so a hash collision costs a lookup, never a shared
/// state. The first endpoint of an address, in entry order, keeps its state.
pub(super) fn share_repeated_states(entries: &mut [Entry]) {
    let mut hashes: Vec<u64> = entries
        .iter()
        .flat_map(|e| e.endpoints.iter().map(|ep| ep.hash))
        .collect();
    hashes.sort_unstable();
    let repeated: HashSet<u64> = hashes
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    if repeated.is_empty() {
        return;
    }
    let mut first: HashMap<SocketAddr, Shared<EndpointState>> = HashMap::default();
    for ep in entries.iter_mut().flat_map(|e| e.endpoints.iter_mut()) {
        if repeated.contains(&ep.hash) {
            ep.state = first.entry(ep.addr).or_insert(ep.state.clone()).clone();
        }
    }
}

/// The certificates of a build as the table holds them: the shared ones, then each
/// address's.
pub(super) fn secret_certs(
    certificates: Certificates,
    by_address: BTreeMap<IpAddr, Certificates>,
) -> Vec<crate::table::SecretCert> {
    let shared = certificates.into_iter().map(|c| (None, c));
    let own = by_address
        .into_iter()
        .flat_map(|(ip, certs)| certs.into_iter().map(move |c| (Some(ip), c)));
    shared
        .chain(own)
        .map(
            |(address, ((ns, name), (hosts, pem)))| crate::table::SecretCert {
                secret: format!("{ns}/{name}").into(),
                address,
                hosts: hosts.into_iter().map(Into::into).collect(),
                pem,
            },
        )
        .collect()
}

/// An entry's name: `svc` for port 80, else `svc:port`, with `ns/` in front when `ns` is
/// given. Built by hand at its exact length (it becomes a `Box<str>` without reallocating):
/// `format!` here was a tenth of a large build.
pub(super) fn entry_name(ns: Option<&str>, name: &str, port: u16) -> String {
    let mut buf = [0u8; 5];
    let digits = crate::table::matcher::port_digits(port, &mut buf);
    let port_len = if port == 80 { 0 } else { 1 + digits.len() };
    let mut s = String::with_capacity(ns.map_or(0, |n| n.len() + 1) + name.len() + port_len);
    if let Some(ns) = ns {
        s.push_str(ns);
        s.push('/');
    }
    s.push_str(name);
    if port != 80 {
        s.push(':');
        s.extend(digits.iter().map(|&d| char::from(d)));
    }
    s
}

/// The path route whose subtree holds `rk` (host-less) and which another Service owns: the
/// shortest such prefix and its entry. `/shop/web` and `/shop/` lie inside `/shop`; a prefix
/// that ignores case is compared in lower case (path routes are Service names, lower case).
fn subtree_owner<'o>(
    owners: &HashMap<(Frontend, &'o str), EntryId>,
    rk: &'o RouteKey,
) -> Option<(&'o str, EntryId)> {
    let p = rk.prefix.as_str();
    let mine = owners.get(&(rk.frontend, p)).copied();
    let bytes = p.as_bytes();
    (1..bytes.len())
        .filter(|&i| bytes[i] == b'/')
        .find_map(|i| {
            let (&(_, prefix), &owner) = owners.get_key_value(&(rk.frontend, &p[..i]))?;
            (Some(owner) != mine).then_some((prefix, owner))
        })
}

pub(super) fn describe_host(host: &Option<HostPattern>) -> String {
    match host {
        None => String::new(),
        Some(HostPattern::Exact(h)) => h.clone(),
        Some(HostPattern::Wildcard(s) | HostPattern::OneLabel(s)) => format!("*{s}"),
    }
}

/// The object a conflict warning about claim `c` (of entry `key`) is about.
fn claimant(c: &RouteClaim, key: &EntryKey) -> ObjectRef {
    match &c.ingress {
        Some(i) => object("Ingress", &i.namespace, &i.name),
        None => object("Service", &key.namespace, &key.service),
    }
}

/// How a conflict warning names the claim: the Service's port, or the Ingress's backend.
fn claim_subject(c: &RouteClaim, key: &EntryKey) -> String {
    match &c.ingress {
        Some(_) => format!("its rule for {key}"),
        None => format!("port {}", key.port),
    }
}
