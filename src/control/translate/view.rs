//! What every part of translate shares: the options, the warnings it returns, the inputs as
//! the sources hand them over (`IngressRefs`, `GatewayRefs` and their borrowed views), keys
//! and stores, the annotation names. Plain types: it must not translate anything, and it
//! names no other part of translate but the Gateway API's types (`gateway::api`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde::Serialize;

use super::gateway::api::{
    BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, ListenerSet, ReferenceGrant,
    TCPRoute, TLSRoute, UDPRoute,
};
use crate::table::balance::Algorithm;
use crate::table::{EntryId, EntryKey};

/// aHash keyed per process: fast, and object names chosen by tenants cannot aim at collisions.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
pub(crate) type HashSet<K> = std::collections::HashSet<K, ahash::RandomState>;

/// The controller name switchyard claims IngressClasses by, unless `--controller-name` says
/// otherwise.
pub const DEFAULT_CONTROLLER_NAME: &str = "switchyard.io/ingress-controller";

/// The controller name switchyard claims GatewayClasses by, unless told another.
pub const DEFAULT_GATEWAY_CONTROLLER_NAME: &str = "switchyard.io/gateway-controller";

/// Annotation keys, as the original named them.
pub mod annotation {
    /// The prefix every key below shares; an unknown key under it is a warning.
    pub const PREFIX: &str = "serviceloadbalancer/";
    pub const ALGORITHM: &str = "serviceloadbalancer/lb.algorithm";
    pub const HOST: &str = "serviceloadbalancer/lb.host";
    pub const SSL_TERM: &str = "serviceloadbalancer/lb.sslTerm";
    pub const ACL_MATCH: &str = "serviceloadbalancer/lb.aclMatch";
    pub const COOKIE_STICKY: &str = "serviceloadbalancer/lb.cookie-sticky-session";
    pub const MAXCONN: &str = "serviceloadbalancer/lb.maxconn";
    pub const CHECK_INTERVAL: &str = "serviceloadbalancer/lb.check-interval";
    pub const CHECK_PATH: &str = "serviceloadbalancer/lb.check-path";
    pub const CHECK_GRPC: &str = "serviceloadbalancer/lb.check-grpc";
    pub const BACKEND_PROTOCOL: &str = "serviceloadbalancer/lb.backend-protocol";
    pub const BACKEND_SNI: &str = "serviceloadbalancer/lb.backend-sni";
    pub const BACKEND_SKIP_VERIFY: &str = "serviceloadbalancer/lb.backend-insecure-skip-verify";
    pub const SEND_PROXY: &str = "serviceloadbalancer/lb.send-proxy-protocol";
    pub const BACKEND_CA_FILE: &str = "serviceloadbalancer/lb.backend-ca-file";
    pub const BACKEND_CA_SECRET: &str = "serviceloadbalancer/lb.backend-ca-secret";
    pub const BACKEND_CA_CONFIGMAP: &str = "serviceloadbalancer/lb.backend-ca-configmap";
    pub const BACKEND_CLIENT_CERT: &str = "serviceloadbalancer/lb.backend-client-cert";
    pub const BACKEND_CLIENT_KEY: &str = "serviceloadbalancer/lb.backend-client-key";
    /// `"true"`: the Service gets routes of its own whatever `--service-routes` says;
    /// `"false"`: it gets none (it can still be an Ingress's or a Gateway route's backend).
    pub const EXPOSE: &str = "serviceloadbalancer/lb.expose";
    /// Every key switchyard reads.
    pub const KNOWN: [&str; 19] = [
        ALGORITHM,
        HOST,
        SSL_TERM,
        ACL_MATCH,
        COOKIE_STICKY,
        MAXCONN,
        CHECK_INTERVAL,
        CHECK_PATH,
        CHECK_GRPC,
        BACKEND_PROTOCOL,
        BACKEND_SNI,
        BACKEND_SKIP_VERIFY,
        SEND_PROXY,
        BACKEND_CA_FILE,
        BACKEND_CA_SECRET,
        BACKEND_CA_CONFIGMAP,
        BACKEND_CLIENT_CERT,
        BACKEND_CLIENT_KEY,
        EXPOSE,
    ];
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Client-IP affinity timeout when the Service does not set one (the Kubernetes default).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);

/// Longest annotation value we accept; longer ones are a warning.
pub(super) const MAX_ANNOTATION_LEN: usize = 4096;

/// Which Services get routes of their own (`--service-routes`): the path route `/<name>`, or
/// the routes their `lb.host` and `lb.aclMatch` annotations ask for. Any Service can still be
/// the backend of an Ingress or a Gateway route, and `--tcp-services` ports are always served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServiceRoutes {
    /// Only the Services that ask: `lb.expose: "true"`, `lb.host` or `lb.aclMatch`. An ingress
    /// pod's safe default: nothing internal becomes reachable because it exists.
    #[default]
    Annotated,
    /// Those, and every Service of the home namespace (`--namespace`, else `default`): the
    /// original service-loadbalancer's mode.
    Namespace,
    /// Every Service of every namespace switchyard watches.
    All,
}

impl ServiceRoutes {
    pub const NAMES: [&str; 3] = ["annotated", "namespace", "all"];

    pub fn as_str(self) -> &'static str {
        match self {
            ServiceRoutes::Annotated => "annotated",
            ServiceRoutes::Namespace => "namespace",
            ServiceRoutes::All => "all",
        }
    }
}

impl std::str::FromStr for ServiceRoutes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "annotated" => Ok(ServiceRoutes::Annotated),
            "namespace" => Ok(ServiceRoutes::Namespace),
            "all" => Ok(ServiceRoutes::All),
            other => Err(format!(
                "{other:?} is not one of {}",
                ServiceRoutes::NAMES.join(", ")
            )),
        }
    }
}

impl fmt::Display for ServiceRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to translate; built from flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--balance-algorithm`: for Services without a valid `lb.algorithm`.
    pub default_algorithm: Algorithm,
    /// `--target-service`: keep only this Service (`name` in any namespace, or `ns/name`).
    pub target_service: Option<String>,
    /// `--forward-services`: the single endpoint is `clusterIP:port`.
    pub forward_services: bool,
    /// `--tcp-services`: these Service ports become raw TCP frontends.
    pub tcp_services: Vec<TcpService>,
    /// Entries of Services in this namespace are named without a `ns/` prefix.
    pub home_namespace: String,
    /// `--namespace`: serve only Services of this namespace.
    pub only_namespace: Option<String>,
    /// `--service-routes`: which Services get routes of their own.
    pub service_routes: ServiceRoutes,
    /// `--serve-kubernetes-service`: also serve `default/kubernetes`, the API server's own
    /// Service (skipped otherwise: exposing the API server through the ingress is never a
    /// default, and its port is HTTPS that switchyard would speak plain HTTP to).
    pub serve_kubernetes_service: bool,
    /// `--controller-name`: IngressClasses whose `spec.controller` is this are switchyard's.
    pub controller_name: String,
    /// `--watch-ingress-without-class`: also serve Ingresses that name no class.
    pub watch_ingress_without_class: bool,
    /// `--enable-ssl-passthrough`: serve `ssl-passthrough` (else such Ingresses are refused).
    pub ssl_passthrough: bool,
    /// `--limit-scope cluster`: the Service (`namespace`, `name`) whose ready endpoints are
    /// the replicas, each enforcing its share of an Ingress's request limits (`None`: each
    /// the whole limit).
    pub limit_peers: Option<(String, String)>,
    /// `--gateway-controller-name`: GatewayClasses whose `spec.controllerName` is this are
    /// switchyard's.
    pub gateway_controller_name: String,
    /// The Gateway listener port that is switchyard's plain HTTP frontend.
    pub gateway_http_port: u16,
    /// The Gateway listener port that is switchyard's TLS frontend.
    pub gateway_https_port: u16,
    /// `--gateway-addresses`: local addresses, each for one Gateway (canonical: an IPv4-mapped
    /// IPv6 address is the IPv4 one); empty: every Gateway is served on every address.
    pub gateway_addresses: Vec<std::net::IpAddr>,
    /// A TLS port is open (`--ssl-cert`, or a cluster without `--https-port 0`): without one, an
    /// Ingress's `spec.tls` cannot be served, which is a warning on it.
    pub tls_port: bool,
    /// The ports switchyard listens on itself (HTTP, TLS, admin, stats): a Gateway's TCP or
    /// TLS listener cannot have one.
    pub own_ports: Vec<u16>,
}

/// Every Service routed (`ServiceRoutes::All`), unlike the flag's default: the translation's
/// tests describe what each Service becomes, and the few about the choice itself set it.
impl Default for Options {
    fn default() -> Self {
        Options {
            default_algorithm: Algorithm::RoundRobin,
            target_service: None,
            forward_services: false,
            tcp_services: Vec::new(),
            home_namespace: "default".into(),
            only_namespace: None,
            service_routes: ServiceRoutes::All,
            serve_kubernetes_service: false,
            controller_name: DEFAULT_CONTROLLER_NAME.into(),
            watch_ingress_without_class: false,
            ssl_passthrough: true,
            limit_peers: None,
            gateway_controller_name: DEFAULT_GATEWAY_CONTROLLER_NAME.into(),
            gateway_http_port: 80,
            gateway_https_port: 443,
            gateway_addresses: Vec::new(),
            tls_port: true,
            own_ports: Vec::new(),
        }
    }
}

/// One `--tcp-services` item: `name:port` or `ns/name:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpService {
    pub namespace: Option<String>,
    pub name: String,
    pub port: u16,
}

impl TcpService {
    pub(super) fn matches(&self, namespace: &str, name: &str, port: u16) -> bool {
        self.name == name
            && self.port == port
            && self.namespace.as_deref().is_none_or(|n| n == namespace)
    }
}

/// The object a warning is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Why a warning was raised; a bounded set, usable as a metric label and an Event reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum WarningReason {
    /// An annotation value was invalid; its default applies.
    InvalidAnnotation,
    /// Two routes claimed the same host and path (or TCP port); the lower key won.
    RouteConflict,
    /// A Service or port was deliberately not served (UDP, LoadBalancer, ExternalName).
    Skipped,
    /// A field of an object could not be used (bad address, missing name).
    InvalidObject,
    /// The same object appeared twice in the input.
    DuplicateObject,
    /// TLS to a Service's endpoints without certificate verification, as its annotation asks.
    InsecureBackend,
    /// The object (or a listener of it) asks for something that restricts access and that
    /// switchyard does not carry out (authentication, client certificates, canary-only
    /// traffic): it is not served, never served open.
    NotServed,
}

impl WarningReason {
    /// Every reason, so that each series can start at 0.
    pub const ALL: [WarningReason; 7] = [
        WarningReason::InvalidAnnotation,
        WarningReason::RouteConflict,
        WarningReason::Skipped,
        WarningReason::InvalidObject,
        WarningReason::DuplicateObject,
        WarningReason::InsecureBackend,
        WarningReason::NotServed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WarningReason::InvalidAnnotation => "InvalidAnnotation",
            WarningReason::RouteConflict => "RouteConflict",
            WarningReason::Skipped => "Skipped",
            WarningReason::InvalidObject => "InvalidObject",
            WarningReason::DuplicateObject => "DuplicateObject",
            WarningReason::InsecureBackend => "InsecureBackend",
            WarningReason::NotServed => "NotServed",
        }
    }
}

/// Something the user should know about one object; the rest of the table is unaffected.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Warning {
    pub object: ObjectRef,
    pub reason: WarningReason,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.object,
            self.reason.as_str(),
            self.message
        )
    }
}

/// An object's key as the cluster source's stores hold it: (namespace, name).
pub type ObjectKey = (String, String);

/// Objects by key, as the cluster source keeps them.
pub type Store<K> = BTreeMap<ObjectKey, K>;

/// The keys of the Services and EndpointSlices that were added, modified or deleted since the
/// previous table was built, as the source saw them.
///
/// It is a hint, guarded where that is cheap: a key told in vain costs a look, a Service add or
/// delete, or an EndpointSlice add or delete, that was not told is caught by counting; only a
/// modification that was not told goes unseen, so a source that cannot vouch for its change
/// set passes none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub services: BTreeSet<ObjectKey>,
    pub slices: BTreeSet<ObjectKey>,
    /// An Ingress, IngressClass, Secret or ConfigMap changed (which makes the build a full
    /// one: a Service's CA bundle may come from a Secret or ConfigMap).
    pub ingress: bool,
    /// A Gateway API object or a Namespace changed. Alone, only the Gateway routes and status
    /// are redone (the entries are shared with the previous table); with anything else, the
    /// build is a full one.
    pub gateway: bool,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.slices.is_empty() && !self.ingress && !self.gateway
    }
}

/// The Ingress side of the inputs held as lists of references, from whatever keeps the
/// objects (a watcher's stores, the manifest files).
#[derive(Debug, Clone, Default)]
pub struct IngressRefs<'a> {
    pub ingresses: Vec<&'a Ingress>,
    pub classes: Vec<&'a IngressClass>,
    pub secrets: Vec<&'a Secret>,
    /// ConfigMaps a Service's `lb.backend-ca-configmap` may name.
    pub config_maps: Vec<&'a ConfigMap>,
    /// The Gateway API objects (and Namespaces, for `allowedRoutes` selectors).
    pub gateway: GatewayRefs<'a>,
}

impl<'a> IngressRefs<'a> {
    pub fn of(
        ingresses: impl IntoIterator<Item = &'a Ingress>,
        classes: impl IntoIterator<Item = &'a IngressClass>,
        secrets: impl IntoIterator<Item = &'a Secret>,
    ) -> Self {
        IngressRefs {
            ingresses: ingresses.into_iter().collect(),
            classes: classes.into_iter().collect(),
            secrets: secrets.into_iter().collect(),
            config_maps: Vec::new(),
            gateway: GatewayRefs::default(),
        }
    }

    pub fn with_config_maps(
        mut self,
        config_maps: impl IntoIterator<Item = &'a ConfigMap>,
    ) -> Self {
        self.config_maps = config_maps.into_iter().collect();
        self
    }

    pub fn with_gateway(mut self, gateway: GatewayRefs<'a>) -> Self {
        self.gateway = gateway;
        self
    }

    pub fn inputs(&self) -> IngressInputs<'_> {
        IngressInputs {
            ingresses: &self.ingresses,
            classes: &self.classes,
            secrets: &self.secrets,
            config_maps: &self.config_maps,
            gateway: self.gateway.inputs(),
        }
    }
}

/// The Ingress side of the inputs: Ingresses, IngressClasses and the Secrets their TLS
/// sections may name, by reference (a rebuild never clones the world); and the ConfigMaps
/// (with those Secrets) that a Service's CA bundle annotations may name.
#[derive(Debug, Clone, Copy, Default)]
pub struct IngressInputs<'a> {
    pub ingresses: &'a [&'a Ingress],
    pub classes: &'a [&'a IngressClass],
    pub secrets: &'a [&'a Secret],
    pub config_maps: &'a [&'a ConfigMap],
    /// The Gateway API objects; their listeners' Secrets are in `secrets`.
    pub gateway: GatewayInputs<'a>,
}

/// The Gateway API inputs held as lists of references, from whatever keeps the objects.
#[derive(Debug, Clone, Default)]
pub struct GatewayRefs<'a> {
    pub classes: Vec<&'a GatewayClass>,
    pub gateways: Vec<&'a Gateway>,
    pub routes: Vec<&'a HTTPRoute>,
    pub grpc_routes: Vec<&'a GRPCRoute>,
    pub tcp_routes: Vec<&'a TCPRoute>,
    pub tls_routes: Vec<&'a TLSRoute>,
    pub udp_routes: Vec<&'a UDPRoute>,
    pub listener_sets: Vec<&'a ListenerSet>,
    pub backend_tls_policies: Vec<&'a BackendTLSPolicy>,
    pub grants: Vec<&'a ReferenceGrant>,
    /// For `allowedRoutes.namespaces.selector`, which selects namespaces by their labels.
    pub namespaces: Vec<&'a Namespace>,
}

impl<'a> GatewayRefs<'a> {
    pub fn inputs(&self) -> GatewayInputs<'_> {
        GatewayInputs {
            classes: &self.classes,
            gateways: &self.gateways,
            routes: &self.routes,
            grpc_routes: &self.grpc_routes,
            tcp_routes: &self.tcp_routes,
            tls_routes: &self.tls_routes,
            udp_routes: &self.udp_routes,
            listener_sets: &self.listener_sets,
            backend_tls_policies: &self.backend_tls_policies,
            grants: &self.grants,
            namespaces: &self.namespaces,
        }
    }
}

/// The Gateway API side of the inputs, by reference.
#[derive(Debug, Clone, Copy, Default)]
pub struct GatewayInputs<'a> {
    pub classes: &'a [&'a GatewayClass],
    pub gateways: &'a [&'a Gateway],
    pub routes: &'a [&'a HTTPRoute],
    pub grpc_routes: &'a [&'a GRPCRoute],
    pub tcp_routes: &'a [&'a TCPRoute],
    pub tls_routes: &'a [&'a TLSRoute],
    pub udp_routes: &'a [&'a UDPRoute],
    pub listener_sets: &'a [&'a ListenerSet],
    pub backend_tls_policies: &'a [&'a BackendTLSPolicy],
    pub grants: &'a [&'a ReferenceGrant],
    pub namespaces: &'a [&'a Namespace],
}

impl GatewayInputs<'_> {
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
            && self.gateways.is_empty()
            && self.routes.is_empty()
            && self.grpc_routes.is_empty()
            && self.tcp_routes.is_empty()
            && self.tls_routes.is_empty()
            && self.udp_routes.is_empty()
    }
}

/// Entry ids by entry key.
pub(super) type EntryIndex = HashMap<EntryKey, EntryId>;

/// TLS Secrets by key, with the hosts to serve each for and its PEM bundle.
pub(super) type Certificates = BTreeMap<ObjectKey, (BTreeSet<String>, Arc<[u8]>)>;
