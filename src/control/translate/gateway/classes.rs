//! The Gateway build's first phase: the GatewayClasses switchyard claims (those whose
//! `controllerName` is `--gateway-controller-name`) and their status. It must not look at
//! Gateways, listeners or routes.

use std::collections::BTreeSet;

use super::api::*;
use super::view::sorted;

/// The names of the GatewayClasses `ours` claims, each given its status in `status`.
pub(super) fn claim_classes<'i>(
    classes: &[&'i GatewayClass],
    ours: &str,
    status: &mut GatewayApiStatus,
) -> BTreeSet<&'i str> {
    let mut claimed: BTreeSet<&str> = BTreeSet::new();
    for class in sorted(classes, |c| &c.metadata) {
        if class.spec.controller_name != ours {
            continue;
        }
        let Some(name) = class.metadata.name.as_deref() else {
            continue;
        };
        claimed.insert(name);
        let generation = class.metadata.generation;
        status.classes.insert(
            name.to_string(),
            GatewayClassStatus {
                conditions: vec![
                    Condition::new(
                        "Accepted",
                        true,
                        "Accepted",
                        "claimed by switchyard",
                        generation,
                    ),
                    Condition::new(
                        "SupportedVersion",
                        true,
                        "SupportedVersion",
                        "Gateway API v1 standard channel",
                        generation,
                    ),
                ],
            },
        );
    }
    claimed
}
