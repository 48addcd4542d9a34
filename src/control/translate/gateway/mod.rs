//! Gateway API: GatewayClasses claimed by `--gateway-controller-name`, their Gateways'
//! listeners, the HTTPRoutes attached to them and the ReferenceGrants that let a route or a
//! listener name an object in another namespace, turned into routes of the table and into
//! the status each object should show. Pure, like the rest of translate.

use k8s_openapi::api::core::v1::Namespace;

pub mod api;

use self::api::{Gateway, GatewayClass, HTTPRoute, ReferenceGrant};

/// The controller name switchyard claims GatewayClasses by, unless told another.
pub const DEFAULT_GATEWAY_CONTROLLER_NAME: &str = "switchyard.io/gateway-controller";

/// The Gateway API inputs held as lists of references, from whatever keeps the objects.
#[derive(Debug, Clone, Default)]
pub struct GatewayRefs<'a> {
    pub classes: Vec<&'a GatewayClass>,
    pub gateways: Vec<&'a Gateway>,
    pub routes: Vec<&'a HTTPRoute>,
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
    pub grants: &'a [&'a ReferenceGrant],
    pub namespaces: &'a [&'a Namespace],
}

impl GatewayInputs<'_> {
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty() && self.gateways.is_empty() && self.routes.is_empty()
    }
}
