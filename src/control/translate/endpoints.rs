//! The endpoints of one Service port from its EndpointSlices: matched by port name or
//! number, ready or draining (serving and terminating), sorted and deduplicated. Pure.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::annotations::show;
use super::inputs::{meta_key, object};
use super::view::*;

/// The endpoint addresses of one Service port, from its EndpointSlices, sorted and
/// deduplicated, each with whether it is draining: ready endpoints take new traffic; endpoints
/// that are not ready but `serving` and `terminating` only keep their sticky clients; all others
/// are left out. An address listed both ways counts as ready.
pub(super) fn endpoint_addrs(
    sp: &ServicePort,
    slices: &[&EndpointSlice],
    warnings: &mut Vec<Warning>,
) -> Vec<(SocketAddr, bool)> {
    endpoint_addrs_of(sp, slices, "TCP", warnings)
}

/// `endpoint_addrs` for a port of `protocol` (`TCP`, or `UDP` for a UDPRoute's backend).
pub(crate) fn endpoint_addrs_of(
    sp: &ServicePort,
    slices: &[&EndpointSlice],
    protocol: &str,
    warnings: &mut Vec<Warning>,
) -> Vec<(SocketAddr, bool)> {
    let want_name = sp.name.as_deref().unwrap_or("");
    let target_number = match &sp.target_port {
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(_)) => None,
        None => Some(sp.port),
    };
    // A handful per port: a sorted Vec beats a map, and (addr, false) sorts before (addr, true),
    // so after dedup by address the ready flavour of a doubly listed address is the one kept.
    let mut out: Vec<(SocketAddr, bool)> = Vec::new();
    for slice in slices {
        let ports = slice.ports.as_deref().unwrap_or(&[]);
        let by_name = ports
            .iter()
            .find(|p| p.name.as_deref().unwrap_or("") == want_name);
        // An unnamed Service port may meet a hand-written slice whose port is named: fall back
        // to the number.
        let matched = by_name.or_else(|| {
            (want_name.is_empty())
                .then(|| {
                    ports
                        .iter()
                        .find(|p| p.port.is_some() && p.port == target_number)
                })
                .flatten()
        });
        // A slice without a matching port has no endpoints for this Service port; a matching
        // port without a number means the target port itself.
        let Some(matched) = matched else {
            continue;
        };
        if matched.protocol.as_deref().unwrap_or("TCP") != protocol {
            continue;
        }
        let Some(Ok(number)) = matched.port.or(target_number).map(u16::try_from) else {
            continue;
        };
        for ep in slice.endpoints.as_deref().unwrap_or(&[]) {
            // Unset conditions mean ready, and serving when ready (the API's documented meaning).
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready) != Some(false);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let draining = match (ready, serving && terminating) {
                (true, _) => false,
                (false, true) => true,
                (false, false) => continue,
            };
            for a in &ep.addresses {
                match a.parse::<IpAddr>() {
                    Ok(ip) => {
                        out.push((SocketAddr::new(ip, number), draining));
                    }
                    Err(_) => {
                        let (ns, name) = meta_key(&slice.metadata.namespace, &slice.metadata.name);
                        warnings.push(Warning {
                            object: object("EndpointSlice", ns, name),
                            reason: WarningReason::InvalidObject,
                            message: format!("address {} is not an IP address; skipped", show(a)),
                        });
                    }
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|(addr, _)| *addr);
    out
}
