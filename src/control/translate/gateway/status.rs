//! The Gateway build's last phase: each of our Gateways' status, its conditions decided from
//! its parameters, the address it was given and its listeners, and the listeners' status with
//! the routes counted on each. It must not change what is served.

use std::collections::BTreeMap;

use super::address::Outcome;
use super::api::*;
use super::listeners::Given;
use super::view::{Gateways, ListenerView, programmed};
use crate::control::translate::build::Builder;
use crate::control::translate::inputs::object;

impl Builder<'_> {
    /// Each of our Gateways' status: its conditions (from its parameters, its address and
    /// its listeners), its listeners' (with the routes counted on each) and its addresses.
    pub(super) fn gateway_statuses(
        &mut self,
        gateways: Gateways<'_>,
        addresses: &BTreeMap<(&str, &str), Given>,
        status: &mut GatewayApiStatus,
    ) {
        for ((ns, name), (gw, listeners, statuses)) in gateways {
            let given = addresses.get(&(ns, name));
            let outcome = given.map(|g| &g.outcome);
            if let Some(
                Outcome::Unsupported(why) | Outcome::NotUsable(why) | Outcome::NotAssigned(why),
            ) = outcome
            {
                // Offline there is no status to read: the log says it too.
                let who = object("Gateway", ns, name);
                self.warn_gateway(&who, format!("not served: {why}"));
            }
            // The Gateway's own listeners come first, its ListenerSets' after.
            let own = listeners.iter().take_while(|l| l.set.is_none()).count();
            let conditions = gateway_conditions(gw, given, &listeners[..own], &statuses[..own]);
            let accepted = conditions
                .iter()
                .any(|c| c.type_ == "Accepted" && c.status == "True");
            let mut counted: Vec<ListenerStatus> = listeners
                .iter()
                .zip(statuses)
                .map(|(l, mut s)| {
                    s.attached_routes = l.attached;
                    s
                })
                .collect();
            let sets = counted.split_off(own);
            let attached_sets =
                self.listener_set_statuses(accepted, &listeners[own..], sets, status);
            let allows_sets = gw
                .spec
                .allowed_listeners
                .as_ref()
                .and_then(|a| a.namespaces.as_ref())
                .and_then(|n| n.from.as_deref())
                .is_some_and(|f| f != "None");
            let listeners = counted;
            status.gateways.insert(
                (ns.to_string(), name.to_string()),
                GatewayStatus {
                    addresses: match outcome {
                        Some(Outcome::Addresses(ips)) => ips
                            .iter()
                            .map(|ip| GatewayAddress {
                                type_: Some("IPAddress".into()),
                                value: ip.to_string(),
                            })
                            .collect(),
                        _ => Vec::new(),
                    },
                    conditions,
                    listeners,
                    attached_listener_sets: allows_sets.then_some(attached_sets),
                },
            );
        }
    }
}

/// One ListenerSet's listeners, as routes see them and their status.
type SetListeners<'v, 'g> = (Vec<&'v ListenerView<'g>>, Vec<ListenerStatus>);

impl Builder<'_> {
    /// The status of each ListenerSet a Gateway took (`views` and `statuses` are their
    /// listeners, in order): accepted when its parent is and one of its listeners is usable
    /// (`ListenersNotValid` when not all are), programmed likewise. How many are accepted.
    fn listener_set_statuses(
        &mut self,
        parent_accepted: bool,
        views: &[ListenerView<'_>],
        statuses: Vec<ListenerStatus>,
        status: &mut GatewayApiStatus,
    ) -> i32 {
        let mut by_set: BTreeMap<(&str, &str), SetListeners<'_, '_>> = BTreeMap::new();
        for (v, s) in views.iter().zip(statuses) {
            if let Some(key) = v.set {
                let e = by_set.entry(key).or_default();
                e.0.push(v);
                e.1.push(s);
            }
        }
        let mut accepted_sets = 0;
        for (key, (views, listeners)) in by_set {
            let g = views.first().and_then(|v| v.generation);
            let usable = views.iter().filter(|v| v.usable).count();
            let conditions = if !parent_accepted {
                vec![
                    Condition::new(
                        "Accepted",
                        false,
                        "ParentNotAccepted",
                        "the Gateway is not accepted",
                        g,
                    ),
                    Condition::new(
                        "Programmed",
                        false,
                        "ParentNotAccepted",
                        "the Gateway is not accepted",
                        g,
                    ),
                ]
            } else if usable == 0 {
                let who = object("ListenerSet", key.0, key.1);
                self.warn_gateway(&who, "none of its listeners can be served".into());
                vec![
                    Condition::new(
                        "Accepted",
                        false,
                        "ListenersNotValid",
                        "no listener is valid",
                        g,
                    ),
                    programmed(false, "no listener is valid", g),
                ]
            } else {
                accepted_sets += 1;
                let reason = if usable == views.len() {
                    "Accepted"
                } else {
                    "ListenersNotValid"
                };
                vec![
                    Condition::new("Accepted", true, reason, "accepted", g),
                    programmed(true, "", g),
                ]
            };
            status.listener_sets.insert(
                (key.0.to_string(), key.1.to_string()),
                ListenerSetStatus {
                    conditions,
                    listeners,
                },
            );
        }
        accepted_sets
    }
}

/// A Gateway's own conditions (`Accepted`, `Programmed`): refused for its parameters or an
/// address it asks and cannot have, else by how many of its listeners serve.
fn gateway_conditions(
    gw: &Gateway,
    given: Option<&Given>,
    listeners: &[ListenerView<'_>],
    statuses: &[ListenerStatus],
) -> Vec<Condition> {
    let generation = gw.metadata.generation;
    let outcome = given.map(|g| &g.outcome);
    // `Accepted` and `Programmed` false, each with its reason and message.
    let refused = |accepted: (&str, String), not_programmed: (&str, String)| {
        vec![
            Condition::new("Accepted", false, accepted.0, accepted.1, generation),
            Condition::new(
                "Programmed",
                false,
                not_programmed.0,
                not_programmed.1,
                generation,
            ),
        ]
    };
    if let Some(p) = gw
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
    {
        // No parameters kind is switchyard's: the Gateway is refused, not served.
        return refused(
            (
                "InvalidParameters",
                format!(
                    "infrastructure.parametersRef {} {}: switchyard takes no parameters",
                    p.kind, p.name
                ),
            ),
            ("Invalid", "the Gateway is not accepted".into()),
        );
    }
    if let Some(Outcome::Unsupported(why)) = outcome {
        return refused(
            ("UnsupportedAddress", why.clone()),
            ("AddressNotUsable", why.clone()),
        );
    }
    if given.is_none() && !gw.spec.addresses.is_empty() {
        return refused(
            (
                "UnsupportedAddress",
                "switchyard takes its addresses from --publish-service or \
                 --publish-status-address; spec.addresses is not supported"
                    .into(),
            ),
            ("AddressNotUsable", "spec.addresses is not supported".into()),
        );
    }
    let mut conditions = served_conditions(given, listeners, statuses, generation);
    // As the spec asks: said on the Gateway while any listener lets unverified clients in.
    let fallback = listeners
        .iter()
        .filter(|l| l.validation.as_ref().is_some_and(|v| v.insecure_fallback))
        .map(|l| l.name)
        .collect::<Vec<_>>();
    if !fallback.is_empty() {
        conditions.push(Condition::new(
            "InsecureFrontendValidationMode",
            true,
            "ConfigurationChanged",
            format!(
                "spec.tls.frontend's mode AllowInsecureFallback serves clients without a valid \
                 certificate on listener(s) {}",
                fallback.join(", ")
            ),
            generation,
        ));
    }
    conditions
}

/// The conditions of a Gateway that is not refused: accepted when some listener is usable
/// (or it has none), programmed when one serves at the address it was given.
fn served_conditions(
    given: Option<&Given>,
    listeners: &[ListenerView<'_>],
    statuses: &[ListenerStatus],
    generation: Option<i64>,
) -> Vec<Condition> {
    // Listeners unusable for want of an address count as they were before.
    let (any_usable, all_usable) = match given {
        Some(g) => (g.any_usable, g.all_usable),
        None => (
            listeners.iter().any(|l| l.usable),
            listeners.iter().all(|l| l.usable),
        ),
    };
    let outcome = given.map(|g| &g.outcome);
    let mut conditions = Vec::new();
    let conflicted = statuses.iter().any(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Conflicted" && c.status == "True")
    });
    let (reason, message) = if all_usable && !conflicted {
        ("Accepted", "accepted")
    } else {
        ("ListenersNotValid", "some listeners are not valid")
    };
    conditions.push(Condition::new(
        "Accepted",
        any_usable || listeners.is_empty(),
        reason,
        message,
        generation,
    ));
    conditions.push(if let Some(Outcome::NotUsable(why)) = outcome {
        Condition::new(
            "Programmed",
            false,
            "AddressNotUsable",
            why.clone(),
            generation,
        )
    } else if let Some(Outcome::NotAssigned(why)) = outcome {
        Condition::new(
            "Programmed",
            false,
            "AddressNotAssigned",
            why.clone(),
            generation,
        )
    } else {
        programmed(any_usable, "no listener can be served", generation)
    });
    conditions
}
