//! The Gateway build's second phase: our Gateways (of a claimed class) with their listeners
//! checked (protocol, port, hostname, conflicts, allowed routes, certificates) and their
//! status but for the routes counted on them, an address of `--gateway-addresses` given to
//! each, and the HTTPS listeners' certificates placed for SNI. It must not look at routes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;

use super::address::{self, Ask, Claim, Outcome};
use super::api::*;
use super::attach::{NamespaceLabels, selects};
use super::view::{
    Allowed, GRPC_ROUTE, Gateways, Grants, HTTP_ROUTE, ListenerCertificates, ListenerView,
    RouteKind, StreamListener, TCP_ROUTE, TLS_ROUTE, UDP_ROUTE, created, created_at, gateway_host,
    listener_key, programmed, sorted,
};
use crate::control::translate::annotations::show;
use crate::control::translate::build::Builder;
use crate::control::translate::ingress::secret_pem;
use crate::control::translate::inputs::{meta_key, object};
use crate::control::translate::view::*;
use crate::table::client_validation::ClientValidation;
use crate::table::gateway::GatewayRoutes;
use crate::table::matcher::HostPattern;

impl Builder<'_> {
    /// Our Gateways (of a class in `classes`, in the namespace served) by key, with their
    /// listeners checked and their status but for the attached-route count.
    pub(super) fn our_gateways<'g>(
        &mut self,
        gateways_in: &[&'g Gateway],
        (sets_in, namespace_labels): (&[&'g ListenerSet], &NamespaceLabels<'_>),
        classes: &BTreeSet<&str>,
        grants: &Grants<'_>,
        secrets: &[&Secret],
        status: &mut GatewayApiStatus,
    ) -> Gateways<'g> {
        let secrets: HashMap<(&str, &str), &Secret> = secrets
            .iter()
            .map(|s| (meta_key(&s.metadata.namespace, &s.metadata.name), *s))
            .collect();
        let mut gateways: Gateways<'g> = BTreeMap::new();
        for gw in sorted(gateways_in, |g| &g.metadata) {
            let (ns, name) = meta_key(&gw.metadata.namespace, &gw.metadata.name);
            if name.is_empty()
                || !classes.contains(gw.spec.gateway_class_name.as_str())
                || self.outside_namespace(ns)
            {
                continue;
            }
            let sets = self.listener_sets(gw, (ns, name), sets_in, namespace_labels, status);
            let (mut views, mut statuses) =
                self.gateway_listeners(gw, (ns, name), &sets, grants, &secrets);
            if gw
                .spec
                .infrastructure
                .as_ref()
                .is_some_and(|i| i.parameters_ref.is_some())
            {
                // A refused Gateway serves nothing (its condition says why).
                unserve(
                    &mut views,
                    &mut statuses,
                    "the Gateway is not accepted",
                    gw.metadata.generation,
                );
            }
            gateways.insert((ns, name), (gw, views, statuses));
        }
        self.orphaned_listener_sets(gateways_in, sets_in, status);
        gateways
    }

    /// ListenerSets whose parent Gateway does not exist: no controller serves them, and one
    /// that was ours (its Gateway deleted) would keep the status it had (`Accepted: True`) if
    /// nothing were written. Each is `Accepted: False` (`ParentNotAccepted`) and warned about.
    /// Sets whose parent exists are their Gateway's class's to judge (ours: above).
    fn orphaned_listener_sets(
        &mut self,
        gateways_in: &[&Gateway],
        sets_in: &[&ListenerSet],
        status: &mut GatewayApiStatus,
    ) {
        let existing: BTreeSet<(&str, &str)> = gateways_in
            .iter()
            .map(|g| meta_key(&g.metadata.namespace, &g.metadata.name))
            .collect();
        for ls in sets_in {
            let key = meta_key(&ls.metadata.namespace, &ls.metadata.name);
            let Some(parent) = parent_gateway(ls, key.0) else {
                continue;
            };
            if key.1.is_empty() || self.outside_namespace(key.0) || existing.contains(&parent) {
                continue;
            }
            let message = format!("parent Gateway {}/{} does not exist", parent.0, parent.1);
            let reasons = ("ParentNotAccepted", "ParentNotProgrammed");
            self.refuse_set(ls, key, reasons, message, status);
        }
    }

    /// A ListenerSet that no listener of it serves: warned about, and its status says why
    /// (`Accepted` and `Programmed` false with these reasons, no listeners).
    fn refuse_set(
        &mut self,
        ls: &ListenerSet,
        key: (&str, &str),
        (accepted, programmed): (&'static str, &'static str),
        message: String,
        status: &mut GatewayApiStatus,
    ) {
        self.warn_gateway(&object("ListenerSet", key.0, key.1), message.clone());
        let generation = ls.metadata.generation;
        status.listener_sets.insert(
            (key.0.to_string(), key.1.to_string()),
            ListenerSetStatus {
                conditions: vec![
                    Condition::new("Accepted", false, accepted, message.clone(), generation),
                    Condition::new("Programmed", false, programmed, message, generation),
                ],
                listeners: Vec::new(),
            },
        );
    }

    /// Checks a Gateway's listeners, records their status (but for the attached-route count)
    /// and their certificates.
    fn gateway_listeners<'g>(
        &mut self,
        gw: &'g Gateway,
        (ns, name): (&'g str, &'g str),
        sets: &[(&'g ListenerSet, (&'g str, &'g str))],
        grants: &Grants<'_>,
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> (Vec<ListenerView<'g>>, Vec<ListenerStatus>) {
        let gateway = object("Gateway", ns, name);
        let gw_generation = gw.metadata.generation;
        let mut views = Vec::new();
        let mut statuses = Vec::new();
        // (port, hostname) taken by the listeners so far, and each port's protocol.
        let mut seen: BTreeMap<(i32, String), usize> = BTreeMap::new();
        let mut protocols: BTreeMap<i32, &str> = BTreeMap::new();
        // The Gateway's own listeners, then its ListenerSets', in the spec's precedence: a
        // later listener conflicts with an earlier one.
        let own = gw.spec.listeners.iter().map(|l| (l, None));
        let added = sets.iter().flat_map(|(ls, key)| {
            ls.spec
                .listeners
                .iter()
                .map(move |l| (l, Some((*key, *ls))))
        });
        for (l, from) in own.chain(added) {
            let set = from.map(|(key, _)| key);
            let (who, generation) = match from {
                Some(((set_ns, set_name), ls)) => (
                    object("ListenerSet", set_ns, set_name),
                    ls.metadata.generation,
                ),
                None => (gateway.clone(), gw_generation),
            };
            let (https, stream, own_port, mut accepted) = self.listener_port(l);
            let hostname = match l.hostname.as_deref().filter(|h| !h.is_empty()) {
                None => None,
                Some(h) => match gateway_host(h) {
                    Ok(p) => Some(p),
                    Err(why) => {
                        accepted = Err(("UnsupportedValue", format!("hostname {} {why}", show(h))));
                        None
                    }
                },
            };
            let conflicted = conflict(l, &mut protocols, &mut seen, views.len());
            // A ListenerSet's listener that conflicts with an earlier one (the Gateway's or an
            // older set's) is not accepted, as the ListenerSet spec says; a Gateway's own keeps
            // `Accepted` and says `Conflicted`.
            if let (Some(_), Some((reason, message)), Ok(())) = (set, &conflicted, &accepted) {
                accepted = Err((reason, message.clone()));
            }
            let allowed = l.allowed_routes.as_ref();
            let (supported, mut refs) = route_kinds(l, allowed);
            // Client-certificate validation: without one CA to verify against, the listener
            // is not served (never served to unverified clients); some refs bad, the others
            // verify and the condition says which is not used.
            // Its refs are checked whatever else refuses the listener, so that `ResolvedRefs`
            // says what they are.
            let mut validation = None;
            let mut validation_refs: Checked = Ok(());
            let mut not_served = false;
            if https {
                match self.client_validation(&who, gw, l, grants) {
                    Ok(None) => {}
                    Ok(Some((v, bad))) => {
                        validation = Some(Arc::new(v));
                        validation_refs = bad;
                    }
                    Err((bad, why)) => {
                        validation_refs = Err(bad);
                        if accepted.is_ok() {
                            not_served = true;
                            accepted = Err(why);
                        }
                    }
                }
            }
            // A TLS listener in Terminate mode (the default mode) terminates with its own
            // certificates, then relays as a TCP listener does.
            let terminate = stream == Some(StreamListener::Tls)
                && matches!(
                    l.tls.as_ref().and_then(|t| t.mode.as_deref()),
                    None | Some("Terminate")
                );
            let mut certificates = Vec::new();
            if https || terminate {
                match Self::listener_certificates(&who, l, grants, secrets) {
                    Ok(c) => certificates = c,
                    Err(e) => refs = Err(e),
                }
            }
            let namespaces = allowed_namespaces(allowed).unwrap_or_else(|e| {
                accepted = Err(e);
                Allowed::Same
            });
            let kinds = supported
                .iter()
                .filter_map(|k| match k.kind.as_str() {
                    HTTP_ROUTE => Some(RouteKind::Http),
                    GRPC_ROUTE => Some(RouteKind::Grpc),
                    TCP_ROUTE => Some(RouteKind::Tcp),
                    TLS_ROUTE => Some(RouteKind::Tls),
                    UDP_ROUTE => Some(RouteKind::Udp),
                    _ => None,
                })
                .collect();
            let usable = accepted.is_ok() && conflicted.is_none() && !supported.is_empty();
            let programmed_ok = usable && refs.is_ok();
            // A CA ref not used is said in `ResolvedRefs`; the listener is served with the
            // others (`Programmed`), verifying clients against fewer CAs, never more.
            let refs = refs.and(validation_refs);
            let conditions =
                listener_conditions(&accepted, &conflicted, &refs, programmed_ok, generation);
            self.warn_listener(&who, l, &conditions, not_served);
            statuses.push(ListenerStatus {
                name: l.name.clone(),
                supported_kinds: supported,
                attached_routes: 0,
                conditions,
            });
            views.push(ListenerView {
                gateway: (ns, name),
                name: &l.name,
                https,
                stream,
                set,
                generation,
                addresses: Vec::new(),
                port: l.port,
                own_port,
                hostname,
                usable,
                kinds,
                namespaces,
                attached: 0,
                certificates,
                terminate,
                validation,
            });
        }
        (views, statuses)
    }

    /// The ListenerSets of Gateway `gw` that it allows (`allowedListeners`), oldest first
    /// (then by namespace and name), as the spec orders their listeners after its own; the
    /// status of those it does not allow (`Accepted: False`, `NotAllowed`) goes to `status`.
    fn listener_sets<'g>(
        &mut self,
        gw: &'g Gateway,
        (ns, name): (&str, &str),
        sets: &[&'g ListenerSet],
        namespace_labels: &NamespaceLabels<'_>,
        status: &mut GatewayApiStatus,
    ) -> Vec<(&'g ListenerSet, (&'g str, &'g str))> {
        let mut out: Vec<(String, &'g ListenerSet, (&'g str, &'g str))> = Vec::new();
        for ls in sorted(sets, |l| &l.metadata) {
            let key = meta_key(&ls.metadata.namespace, &ls.metadata.name);
            let ours = parent_gateway(ls, key.0) == Some((ns, name));
            if !ours || key.1.is_empty() {
                continue;
            }
            let from = gw
                .spec
                .allowed_listeners
                .as_ref()
                .and_then(|a| a.namespaces.as_ref());
            let allowed = match from.and_then(|f| f.from.as_deref()).unwrap_or("None") {
                "All" => true,
                "Same" => key.0 == ns,
                "Selector" => from
                    .and_then(|f| f.selector.as_ref())
                    .is_some_and(|sel| selects(sel, namespace_labels.get(key.0).copied())),
                _ => false,
            };
            if allowed {
                out.push((created_at(&ls.metadata), ls, key));
                continue;
            }
            let message = format!(
                "Gateway {ns}/{name} does not allow ListenerSets from namespace {} \
                 (spec.allowedListeners)",
                key.0
            );
            self.refuse_set(ls, key, ("NotAllowed", "NotAllowed"), message, status);
        }
        out.sort_by(|a, b| (&a.0, a.2).cmp(&(&b.0, b.2)));
        out.into_iter().map(|(_, ls, key)| (ls, key)).collect()
    }

    /// Whether a listener is HTTPS or a stream (TCP, TLS, UDP), the port of its own an HTTP or
    /// HTTPS listener has (none on the Gateway port of its protocol), and whether its
    /// protocol and port are served: HTTP and HTTPS on switchyard's own frontends' ports or
    /// ports of their own, TCP, TLS and UDP on a port of their own (TLS also on the TLS port,
    /// by server name).
    fn listener_port(&self, l: &Listener) -> (bool, Option<StreamListener>, Option<u16>, Checked) {
        let o = self.options;
        let refuse = |reason, message: String| Err((reason, message));
        match l.protocol.as_str() {
            "HTTP" | "HTTPS" => {
                let https = l.protocol == "HTTPS";
                let served_port = if https {
                    o.gateway_https_port
                } else {
                    o.gateway_http_port
                };
                // On the Gateway port of its protocol, switchyard's own HTTP or TLS port
                // serves it; on any other, a port of its own is opened for it.
                let (own_port, accepted) = if l.port == i32::from(served_port) {
                    (None, Ok(()))
                } else {
                    (u16::try_from(l.port).ok(), self.stream_port(l, false))
                };
                (https, None, own_port, accepted)
            }
            "TCP" => (
                false,
                Some(StreamListener::Tcp),
                None,
                self.stream_port(l, false),
            ),
            "TLS" => {
                let mode = l.tls.as_ref().and_then(|t| t.mode.as_deref());
                let accepted = match mode {
                    Some("Passthrough") => self.stream_port(l, true),
                    // Terminated, then relayed as TCP: on a port of its own, where nothing
                    // else terminates.
                    None | Some("Terminate") => {
                        if u16::try_from(l.port).ok() == Some(self.options.gateway_https_port) {
                            refuse(
                                "UnsupportedValue",
                                format!(
                                    "tls.mode Terminate is not served on the Gateway HTTPS \
                                     port {} (an HTTPS listener terminates there; a TLS \
                                     listener there passes through)",
                                    l.port
                                ),
                            )
                        } else {
                            self.stream_port(l, false)
                        }
                    }
                    Some(other) => refuse(
                        "UnsupportedValue",
                        format!(
                            "tls.mode {} is not a TLS listener's mode (Passthrough or \
                             Terminate)",
                            show(other)
                        ),
                    ),
                };
                (false, Some(StreamListener::Tls), None, accepted)
            }
            // UDP ports are apart from TCP's: none of switchyard's own is UDP.
            "UDP" => {
                let accepted = match u16::try_from(l.port) {
                    Ok(p) if p > 0 => Ok(()),
                    _ => refuse("PortUnavailable", format!("port {} is not a port", l.port)),
                };
                (false, Some(StreamListener::Udp), None, accepted)
            }
            other => (
                false,
                None,
                None,
                refuse(
                    "UnsupportedProtocol",
                    format!("protocol {other} is not served (HTTP, HTTPS, TCP, TLS and UDP are)"),
                ),
            ),
        }
    }

    /// Whether a stream listener's port can be opened: not one of switchyard's own ports
    /// (the Gateway HTTP port, `--tcp-services`, the HTTP, admin and stats ports), nor the
    /// TLS port unless the listener is TLS, which shares it by server name.
    fn stream_port(&self, l: &Listener, tls: bool) -> Checked {
        let o = self.options;
        let port = u16::try_from(l.port).ok().filter(|p| *p > 0);
        let Some(port) = port else {
            return Err(("PortUnavailable", format!("port {} is not a port", l.port)));
        };
        let taken = if port == o.gateway_https_port {
            (!tls || !o.tls_port).then_some(if o.tls_port {
                "the Gateway HTTPS port (--gateway-https-port); a TLS listener may share it"
            } else {
                "the Gateway HTTPS port, and no TLS port is open"
            })
        } else if port == o.gateway_http_port {
            Some("the Gateway HTTP port (--gateway-http-port)")
        } else if o.tcp_services.iter().any(|t| t.port == port) {
            Some("a --tcp-services port")
        } else if o.own_ports.contains(&port) {
            Some("one of switchyard's own ports (HTTP, TLS, admin, stats)")
        } else {
            None
        };
        match taken {
            Some(what) => Err(("PortUnavailable", format!("port {port} is {what}"))),
            None => Ok(()),
        }
    }

    /// The client-certificate validation `gw` asks for on HTTPS listener `l`
    /// (`spec.tls.frontend`: its `perPort` entry for the listener's port, else its
    /// `default`): `None` when it asks none; the CA bundle of its usable refs with the
    /// `ResolvedRefs` failure of the others; or, when no ref is usable, the `ResolvedRefs`
    /// failure and the `Accepted` one (`NoValidCACertificate`).
    fn client_validation(
        &mut self,
        who: &ObjectRef,
        gw: &Gateway,
        l: &Listener,
        grants: &Grants<'_>,
    ) -> ValidationCheck {
        let Some(v) = gw
            .spec
            .tls
            .as_ref()
            .and_then(|t| t.frontend.as_ref())
            .and_then(|f| f.validation_on(l.port))
        else {
            return Ok(None);
        };
        let gateway_ns = gw.metadata.namespace.as_deref().unwrap_or("default");
        let mut pem: Vec<u8> = Vec::new();
        let mut resolved: Checked = Ok(());
        let mut usable = 0;
        for r in &v.ca_certificate_refs {
            let core = r.group.is_empty() || r.group == "core";
            let kind = r.kind.as_str();
            if !core || !(kind == "ConfigMap" || kind == "Secret") {
                resolved = resolved.and(Err((
                    "InvalidCACertificateKind",
                    format!(
                        "caCertificateRef {} {} is not a ConfigMap (nor a Secret)",
                        show(kind),
                        show(&r.name)
                    ),
                )));
                continue;
            }
            let ns = r.namespace.as_deref().unwrap_or(gateway_ns);
            if ns != gateway_ns && !grants.allows(("Gateway", gateway_ns), ("", kind, ns, &r.name))
            {
                resolved = resolved.and(Err((
                    "RefNotPermitted",
                    format!(
                        "{kind} {ns}/{} is in another namespace and no ReferenceGrant allows it",
                        show(&r.name)
                    ),
                )));
                continue;
            }
            match self.trust.ca_pem(kind, ns, &r.name) {
                Ok(bytes) => {
                    usable += 1;
                    pem.extend_from_slice(&bytes);
                    pem.push(b'\n');
                }
                Err(why) => {
                    resolved = resolved.and(Err((
                        "InvalidCACertificateRef",
                        format!("{kind} {ns}/{} {why}", show(&r.name)),
                    )));
                }
            }
        }
        // A ref not used is warned of with the listener's `ResolvedRefs` condition.
        if usable == 0 {
            let bad = resolved.err().unwrap_or((
                "InvalidCACertificateRef",
                "spec.tls.frontend's validation names no caCertificateRef".into(),
            ));
            let why = (
                "NoValidCACertificate",
                format!(
                    "no caCertificateRef of spec.tls.frontend for port {} holds a usable CA \
                     certificate; not served, so that no client is served unverified",
                    l.port
                ),
            );
            return Err((bad, why));
        }
        let insecure_fallback = v.mode.as_deref() == Some("AllowInsecureFallback");
        if insecure_fallback {
            self.warn_gateway(
                who,
                format!(
                    "listener {}: spec.tls.frontend's mode AllowInsecureFallback serves clients \
                     without a valid certificate too",
                    l.name
                ),
            );
        }
        let origin = format!("{}/{}/{}", who.namespace, who.name, l.name);
        Ok(Some((
            ClientValidation {
                ca: Arc::from(pem),
                insecure_fallback,
                origin: origin.into(),
                ingress: None,
            },
            resolved,
        )))
    }

    /// Warns of each of a listener's conditions that is false but `Conflicted` and
    /// `Programmed` (the first says it, the second follows); a listener refused for client
    /// validation is `NotServed`.
    fn warn_listener(
        &mut self,
        who: &ObjectRef,
        l: &Listener,
        conditions: &[Condition],
        not_served: bool,
    ) {
        for c in conditions {
            if c.status == "False" && c.type_ != "Conflicted" && c.type_ != "Programmed" {
                let message = format!("listener {}: {}", l.name, c.message);
                if not_served && c.type_ == "Accepted" {
                    self.warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::NotServed,
                        message,
                    });
                } else {
                    self.warn_gateway(who, message);
                }
            }
        }
    }

    /// Loads the certificates of the served HTTPS listeners into the table, for SNI by the
    /// listener's hostname (or, without one, by the names in the certificate): those of a
    /// Gateway with an address of its own for handshakes to that address, the others for
    /// every address. Two Gateways of the shared address space whose listeners give one
    /// hostname different certificates conflict: the oldest Gateway's (then by namespace and
    /// name, as routes rank) is served, and the other listener says `Conflicted: True`
    /// (`HostnameConflict`) and a warning names both. Its routes stay served, as they are on
    /// the HTTP port, where such listeners share their host levels.
    pub(super) fn place_certificates(&mut self, gateways: &mut Gateways<'_>) {
        let mut order: Vec<(String, (&str, &str))> = gateways
            .iter()
            .map(|(&key, (gw, _, _))| (created(gw), key))
            .collect();
        order.sort();
        // The shared address space: hostname -> the Gateway, listener and Secrets that have it.
        let mut claimed: HashMap<String, Holder<'_>> = HashMap::default();
        for (_, key) in &order {
            let Some((gw, views, statuses)) = gateways.get_mut(key) else {
                continue;
            };
            let generation = gw.metadata.generation;
            for (l, st) in views.iter().zip(statuses.iter_mut()) {
                // A TLS listener's certificates terminate on its own port, not the TLS port's.
                if !l.usable || l.certificates.is_empty() || l.stream.is_some() {
                    continue;
                }
                let host = match &l.hostname {
                    None => "*".to_string(),
                    Some(HostPattern::Exact(n)) => n.clone(),
                    Some(HostPattern::Wildcard(s) | HostPattern::OneLabel(s)) => format!("*{s}"),
                };
                if l.addresses.is_empty() {
                    let refs: Vec<ObjectKey> =
                        l.certificates.iter().map(|(k, _)| k.clone()).collect();
                    // Without a hostname the certificate's own names are served: which of
                    // two such certificates a name gets is the store's order.
                    match claimed.get(&host) {
                        Some(h) if host != "*" && h.secrets != refs => {
                            let message = format!(
                                "hostname {host} on the TLS port is also listener {} of \
                                 Gateway {}/{}, older (or first by namespace and name), whose \
                                 certificateRefs are served for it; this listener's are not",
                                h.listener, h.gateway.0, h.gateway.1
                            );
                            let who = object("Gateway", key.0, key.1);
                            self.warn_gateway(&who, format!("listener {}: {message}", l.name));
                            hostname_conflict(st, message, generation, false);
                            continue;
                        }
                        Some(_) => {}
                        None => {
                            claimed.insert(
                                host.clone(),
                                Holder {
                                    gateway: *key,
                                    listener: l.name,
                                    secrets: refs,
                                },
                            );
                        }
                    }
                    add_certificates(&mut self.certificates, &l.certificates, &host);
                }
                // A Gateway with addresses of its own has its certificates on each of them.
                for ip in &l.addresses {
                    let certs = self.address_certificates.entry(*ip).or_default();
                    add_certificates(certs, &l.certificates, &host);
                }
            }
        }
    }

    /// Places the client validation of every served HTTPS listener for the TLS port, by its
    /// frontend (its Gateway's own addresses, or the shared one) and hostname, as its routes
    /// are placed. Listeners of two Gateways share a hostname's routes on a frontend: when
    /// they ask different things of clients (one verifies and one does not, or against other
    /// CAs, or one falls back), the oldest Gateway's listener (then by namespace and name)
    /// decides, and the other is not served (`Conflicted: True`, `HostnameConflict`), so that
    /// no route of a listener that verifies clients is served under one that does not.
    pub(super) fn place_validations(&mut self, gateways: &mut Gateways<'_>) {
        let mut order: Vec<(String, (&str, &str))> = gateways
            .iter()
            .map(|(&key, (gw, _, _))| (created(gw), key))
            .collect();
        order.sort();
        // (frontend address, hostname key) -> the listener that holds it and what it asks.
        type Held<'g> = ((&'g str, &'g str), &'g str, Option<Arc<ClientValidation>>);
        let mut held: HashMap<(Option<IpAddr>, Option<u16>, String), Held<'_>> = HashMap::default();
        for (_, key) in &order {
            let Some((gw, views, statuses)) = gateways.get_mut(key) else {
                continue;
            };
            let generation = gw.metadata.generation;
            for (l, st) in views.iter_mut().zip(statuses.iter_mut()) {
                if !l.usable || !l.https || l.stream.is_some() {
                    continue;
                }
                let host = listener_key(l.hostname.as_ref())
                    .0
                    .unwrap_or("")
                    .to_string();
                let addresses: Vec<Option<IpAddr>> = if l.addresses.is_empty() {
                    vec![None]
                } else {
                    l.addresses.iter().copied().map(Some).collect()
                };
                let mut clash = None;
                for address in &addresses {
                    match held.get(&(*address, l.own_port, host.clone())) {
                        Some((g, name, v)) if *v != l.validation => {
                            clash = Some(format!(
                                "hostname {} on the TLS port is also listener {name} of Gateway \
                                 {}/{}, older (or first by namespace and name), which asks \
                                 other client-certificate validation (spec.tls.frontend); \
                                 this listener is not served",
                                if host.is_empty() { "*" } else { &host },
                                g.0,
                                g.1
                            ));
                        }
                        _ => {}
                    }
                }
                if let Some(message) = clash {
                    let who = object("Gateway", key.0, key.1);
                    self.warnings.push(Warning {
                        object: who,
                        reason: WarningReason::NotServed,
                        message: format!("listener {}: {message}", l.name),
                    });
                    l.usable = false;
                    hostname_conflict(st, message, generation, true);
                    continue;
                }
                for address in addresses {
                    held.entry((address, l.own_port, host.clone())).or_insert((
                        *key,
                        l.name,
                        l.validation.clone(),
                    ));
                    if let Some(v) = &l.validation {
                        let k = (address, l.own_port, host.clone().into_boxed_str());
                        self.client_validations.push((k, Arc::clone(v)));
                    }
                }
            }
        }
    }

    /// An HTTPS listener's certificates, by Secret, or why they cannot be served.
    fn listener_certificates(
        who: &ObjectRef,
        l: &Listener,
        grants: &Grants<'_>,
        secrets: &HashMap<(&str, &str), &Secret>,
    ) -> Result<ListenerCertificates, (&'static str, String)> {
        let Some(tls) = l.tls.as_ref() else {
            return Err((
                "InvalidCertificateRef",
                "an HTTPS listener needs tls.certificateRefs".into(),
            ));
        };
        if tls.mode.as_deref().is_some_and(|m| m != "Terminate") {
            return Err((
                "InvalidTLSConfiguration",
                "only tls.mode Terminate is served".into(),
            ));
        }
        if tls.certificate_refs.is_empty() {
            return Err((
                "InvalidCertificateRef",
                "tls.certificateRefs is empty".into(),
            ));
        }
        let mut out = Vec::with_capacity(tls.certificate_refs.len());
        for r in &tls.certificate_refs {
            let group = r.group.as_deref().unwrap_or("");
            let kind = r.kind.as_deref().unwrap_or("Secret");
            if !(group.is_empty() || group == "core") || kind != "Secret" {
                return Err((
                    "InvalidCertificateRef",
                    format!("certificateRef {kind} {} is not a Secret", r.name),
                ));
            }
            let ns = r.namespace.as_deref().unwrap_or(&who.namespace);
            if ns != who.namespace
                && !grants.allows(("Gateway", &who.namespace), ("", "Secret", ns, &r.name))
            {
                return Err((
                    "RefNotPermitted",
                    format!(
                        "Secret {ns}/{} is in another namespace and no ReferenceGrant allows it",
                        r.name
                    ),
                ));
            }
            let Some(secret) = secrets.get(&(ns, r.name.as_str())) else {
                return Err((
                    "InvalidCertificateRef",
                    format!(
                        "Secret {ns}/{} does not exist (or is not kubernetes.io/tls)",
                        r.name
                    ),
                ));
            };
            let pem = secret_pem(secret).map_err(|why| {
                (
                    "InvalidCertificateRef",
                    format!("Secret {ns}/{} {why}", r.name),
                )
            })?;
            out.push(((ns.to_string(), r.name.clone()), pem));
        }
        Ok(out)
    }
}

/// Marks a listener `Conflicted: True` (`HostnameConflict`, saying `message`), and, when the
/// conflict leaves it unserved, `Programmed: False`.
fn hostname_conflict(
    st: &mut ListenerStatus,
    message: String,
    generation: Option<i64>,
    unserved: bool,
) {
    for c in st.conditions.iter_mut() {
        if c.type_ == "Conflicted" {
            *c = Condition::new(
                "Conflicted",
                true,
                "HostnameConflict",
                message.clone(),
                generation,
            );
        } else if unserved && c.type_ == "Programmed" {
            *c = programmed(false, "not served: a hostname conflict", generation);
        }
    }
}

/// A listener check: `Err` with its condition's reason and message.
type Checked = Result<(), (&'static str, String)>;

/// A listener's client validation (`Builder::client_validation`): none, or the validation
/// with the `ResolvedRefs` failure of refs not used; `Err`: the `ResolvedRefs` and `Accepted`
/// failures of a listener not served.
type ValidationCheck =
    Result<Option<(ClientValidation, Checked)>, ((&'static str, String), (&'static str, String))>;

/// A listener's conflict with those before it (`ProtocolConflict` on its port, else
/// `HostnameConflict` with the same port and hostname), noting it in `protocols` and `seen`
/// (as listener `index`) when it has none.
fn conflict<'l>(
    l: &'l Listener,
    protocols: &mut BTreeMap<i32, &'l str>,
    seen: &mut BTreeMap<(i32, String), usize>,
    index: usize,
) -> Option<(&'static str, String)> {
    let mut conflicted = None;
    let host_key = l.hostname.clone().unwrap_or_default().to_ascii_lowercase();
    match protocols.get(&l.port) {
        Some(p) if *p != l.protocol => {
            conflicted = Some((
                "ProtocolConflict",
                format!("port {} has another protocol", l.port),
            ));
        }
        _ => {
            protocols.insert(l.port, &l.protocol);
        }
    }
    if conflicted.is_none() {
        if let Some(&first) = seen.get(&(l.port, host_key.clone())) {
            conflicted = Some((
                "HostnameConflict",
                format!("same port and hostname as listener #{first}"),
            ));
        } else {
            seen.insert((l.port, host_key), index);
        }
    }
    conflicted
}

/// The kinds of route a listener supports: HTTPRoute and GRPCRoute on HTTP and HTTPS
/// (gRPC arrives as HTTP/2, by ALPN on the TLS port and with prior knowledge on the HTTP
/// port, as the GRPCRoute spec asks of both protocols), TCPRoute on TCP, TLSRoute on TLS;
/// `InvalidRouteKinds` for any other it names.
fn route_kinds(l: &Listener, allowed: Option<&AllowedRoutes>) -> (Vec<RouteGroupKind>, Checked) {
    let mut refs: Checked = Ok(());
    let kinds = allowed.map(|a| a.kinds.as_slice()).unwrap_or(&[]);
    let mut supported = Vec::new();
    let kind = |k: &str| RouteGroupKind {
        group: Some(GROUP.into()),
        kind: k.into(),
    };
    let takes: &[&str] = match l.protocol.as_str() {
        "HTTP" | "HTTPS" => &[HTTP_ROUTE, GRPC_ROUTE],
        "TCP" => &[TCP_ROUTE],
        "TLS" => &[TLS_ROUTE],
        "UDP" => &[UDP_ROUTE],
        // A listener of a protocol not served supports no kind of route.
        _ => return (supported, refs),
    };
    if kinds.is_empty() {
        supported.extend(takes.iter().map(|k| kind(k)));
    } else {
        for k in kinds {
            if k.group.as_deref().unwrap_or(GROUP) == GROUP && takes.contains(&k.kind.as_str()) {
                let known = kind(&k.kind);
                if !supported.contains(&known) {
                    supported.push(known);
                }
            } else {
                refs = Err((
                    "InvalidRouteKinds",
                    format!(
                        "route kind {} is not supported on a {} listener",
                        k.kind, l.protocol
                    ),
                ));
            }
        }
    }
    (supported, refs)
}

/// The namespaces a listener takes routes from; `Err` for a `from` switchyard does not know
/// (or a `Selector` without its selector).
fn allowed_namespaces(
    allowed: Option<&AllowedRoutes>,
) -> Result<Allowed<'_>, (&'static str, String)> {
    match allowed
        .and_then(|a| a.namespaces.as_ref())
        .map(|n| (n.from.as_deref().unwrap_or("Same"), n.selector.as_ref()))
    {
        None | Some(("Same", _)) => Ok(Allowed::Same),
        Some(("All", _)) => Ok(Allowed::All),
        Some(("Selector", Some(sel))) => Ok(Allowed::Selector(sel)),
        Some((other, _)) => Err((
            "UnsupportedValue",
            format!(
                "allowedRoutes.namespaces.from {} (or a missing selector)",
                show(other)
            ),
        )),
    }
}

/// A listener's conditions from its checks.
fn listener_conditions(
    accepted: &Checked,
    conflicted: &Option<(&'static str, String)>,
    refs: &Checked,
    programmed_ok: bool,
    generation: Option<i64>,
) -> Vec<Condition> {
    let mut conditions = vec![
        match &accepted {
            Ok(()) => Condition::new("Accepted", true, "Accepted", "accepted", generation),
            Err((r, m)) => Condition::new("Accepted", false, r, m.clone(), generation),
        },
        match &conflicted {
            None => Condition::new(
                "Conflicted",
                false,
                "NoConflicts",
                "no conflicts",
                generation,
            ),
            Some((r, m)) => Condition::new("Conflicted", true, r, m.clone(), generation),
        },
        match &refs {
            Ok(()) => Condition::new("ResolvedRefs", true, "ResolvedRefs", "resolved", generation),
            Err((r, m)) => Condition::new("ResolvedRefs", false, r, m.clone(), generation),
        },
    ];
    conditions.push(programmed(
        programmed_ok,
        "not served as configured",
        generation,
    ));
    conditions
}

/// Which listener has a hostname's certificate in the shared address space.
struct Holder<'g> {
    gateway: (&'g str, &'g str),
    listener: &'g str,
    /// Its `certificateRefs`, resolved.
    secrets: Vec<ObjectKey>,
}

/// Adds a listener's certificates to `to`, for its hostname `host` (`*`: none).
fn add_certificates(to: &mut Certificates, certificates: &ListenerCertificates, host: &str) {
    for ((ns, name), pem) in certificates {
        to.entry((ns.clone(), name.clone()))
            .or_insert_with(|| (BTreeSet::new(), Arc::clone(pem)))
            .0
            .insert(host.to_string());
    }
}

/// What `--gateway-addresses` gave one Gateway, and how usable its listeners were before.
pub(super) struct Given {
    pub(super) outcome: Outcome,
    pub(super) any_usable: bool,
    pub(super) all_usable: bool,
}

/// Gives each served Gateway an address of `pool` (none when it is empty: every Gateway is
/// shared), keeping the addresses of `previous`: a Gateway with one serves its listeners on
/// it alone; a Gateway that gets none serves nothing (its status says why).
pub(super) fn give_addresses<'g>(
    pool: &[IpAddr],
    gateways: &mut Gateways<'g>,
    previous: Option<&GatewayRoutes>,
) -> BTreeMap<(&'g str, &'g str), Given> {
    if pool.is_empty() {
        return BTreeMap::new();
    }
    let mut before: HashMap<(&str, &str), Vec<IpAddr>> = HashMap::default();
    for (ns, name, ip) in previous.into_iter().flat_map(GatewayRoutes::assigned) {
        before.entry((ns, name)).or_default().push(ip);
    }
    let claims: Vec<Claim<'g>> = gateways
        .iter()
        // A Gateway refused for its parameters is not served: it takes no address.
        .filter(|(_, (gw, _, _))| {
            gw.spec
                .infrastructure
                .as_ref()
                .is_none_or(|i| i.parameters_ref.is_none())
        })
        .map(|(&(ns, name), (gw, _, _))| Claim {
            namespace: ns,
            name,
            created: created(gw),
            ask: Ask::of(
                gw.spec
                    .addresses
                    .iter()
                    .map(|a| (a.type_.as_deref(), a.value.as_str())),
            ),
            previous: match before.get(&(ns, name)) {
                Some(ips) => ips.clone(),
                // After a restart: the addresses its status shows.
                None => gw
                    .status
                    .iter()
                    .flat_map(|s| &s.addresses)
                    .filter(|a| a.type_.as_deref().unwrap_or("IPAddress") == "IPAddress")
                    .filter_map(|a| a.value.parse().ok())
                    .collect(),
            },
        })
        .collect();
    let outcomes = address::assign(pool, &claims);
    let mut out = BTreeMap::new();
    for (key, outcome) in outcomes {
        let Some((gw, views, statuses)) = gateways.get_mut(&key) else {
            continue;
        };
        let given = Given {
            any_usable: views.iter().any(|l| l.usable),
            all_usable: views.iter().all(|l| l.usable),
            outcome,
        };
        match &given.outcome {
            Outcome::Addresses(ips) => {
                for v in views.iter_mut() {
                    v.addresses.clone_from(ips);
                }
            }
            _ => {
                // Not served anywhere: a shared frontend is not its to take.
                unserve(
                    views,
                    statuses,
                    "the Gateway has no address",
                    gw.metadata.generation,
                );
            }
        }
        out.insert(key, given);
    }
    out
}

/// A Gateway that serves nothing: its listeners take no routes and say they are not
/// programmed, for `why`.
fn unserve(
    views: &mut [ListenerView<'_>],
    statuses: &mut [ListenerStatus],
    why: &str,
    generation: Option<i64>,
) {
    for v in views.iter_mut() {
        v.usable = false;
    }
    for c in statuses.iter_mut().flat_map(|s| s.conditions.iter_mut()) {
        if c.type_ == "Programmed" {
            *c = Condition::new("Programmed", false, "Invalid", why, generation);
        }
    }
}

/// The Gateway a ListenerSet's `parentRef` names (in the set's namespace unless it says
/// another), or `None` when it names another kind.
fn parent_gateway<'s>(ls: &'s ListenerSet, set_ns: &'s str) -> Option<(&'s str, &'s str)> {
    let p = &ls.spec.parent_ref;
    let a_gateway = p.group.as_deref().unwrap_or(GROUP) == GROUP
        && p.kind.as_deref().unwrap_or("Gateway") == "Gateway";
    a_gateway.then(|| (p.namespace.as_deref().unwrap_or(set_ns), p.name.as_str()))
}
