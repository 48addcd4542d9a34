//! The routing objects as a source hands them over whole: the manifest files' objects
//! (`control::manifests`) and a one-time listing of the cluster's (`control::watch::snapshot`,
//! for `--dry-run`), with their view for translate. A plain holder: it must not read files,
//! talk to the API server or feed the pipeline itself.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use crate::control::translate::gateway::api::{
    BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, ListenerSet, ReferenceGrant,
    TCPRoute, TLSRoute, UDPRoute,
};
use crate::control::translate::{GatewayRefs, IngressRefs};

/// The routing objects a source read: the files' (`control::manifests`) or one listing of the
/// cluster's (`control::watch::snapshot`).
#[derive(Debug, Default, Clone)]
pub struct Objects {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub ingresses: Vec<Ingress>,
    pub classes: Vec<IngressClass>,
    pub secrets: Vec<Secret>,
    /// Those that hold a `ca.crt`, cut down to it (as the cluster source keeps them).
    pub config_maps: Vec<ConfigMap>,
    pub gateway_classes: Vec<GatewayClass>,
    pub gateways: Vec<Gateway>,
    pub http_routes: Vec<HTTPRoute>,
    pub grpc_routes: Vec<GRPCRoute>,
    pub tcp_routes: Vec<TCPRoute>,
    pub tls_routes: Vec<TLSRoute>,
    pub udp_routes: Vec<UDPRoute>,
    pub listener_sets: Vec<ListenerSet>,
    pub backend_tls_policies: Vec<BackendTLSPolicy>,
    /// `gateway.networking.k8s.io/v1beta1` or `v1` (the same schema).
    pub reference_grants: Vec<ReferenceGrant>,
    pub namespaces: Vec<Namespace>,
    /// What was read past without effect and was likely meant to have one: a field its object
    /// has not (`spec.prots`), a kind that is a misspelling of one switchyard reads
    /// (`Servce`). Each names its file, document and object; the loader logs them.
    pub unread: Vec<String>,
}

impl Objects {
    /// The Ingress side (with the Gateway API objects), by reference, for translate.
    pub fn ingress_refs(&self) -> IngressRefs<'_> {
        IngressRefs::of(&self.ingresses, &self.classes, &self.secrets)
            .with_config_maps(&self.config_maps)
            .with_gateway(GatewayRefs {
                classes: self.gateway_classes.iter().collect(),
                gateways: self.gateways.iter().collect(),
                routes: self.http_routes.iter().collect(),
                grpc_routes: self.grpc_routes.iter().collect(),
                tcp_routes: self.tcp_routes.iter().collect(),
                tls_routes: self.tls_routes.iter().collect(),
                udp_routes: self.udp_routes.iter().collect(),
                listener_sets: self.listener_sets.iter().collect(),
                backend_tls_policies: self.backend_tls_policies.iter().collect(),
                grants: self.reference_grants.iter().collect(),
                namespaces: self.namespaces.iter().collect(),
            })
    }

    /// Adds `other`'s objects (and notes) to these.
    pub(crate) fn extend(&mut self, other: Objects) {
        self.services.extend(other.services);
        self.slices.extend(other.slices);
        self.ingresses.extend(other.ingresses);
        self.classes.extend(other.classes);
        self.secrets.extend(other.secrets);
        self.config_maps.extend(other.config_maps);
        self.gateway_classes.extend(other.gateway_classes);
        self.gateways.extend(other.gateways);
        self.http_routes.extend(other.http_routes);
        self.grpc_routes.extend(other.grpc_routes);
        self.tcp_routes.extend(other.tcp_routes);
        self.tls_routes.extend(other.tls_routes);
        self.udp_routes.extend(other.udp_routes);
        self.listener_sets.extend(other.listener_sets);
        self.backend_tls_policies.extend(other.backend_tls_policies);
        self.reference_grants.extend(other.reference_grants);
        self.namespaces.extend(other.namespaces);
        self.unread.extend(other.unread);
    }
}
