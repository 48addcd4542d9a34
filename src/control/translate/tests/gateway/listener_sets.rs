//! ListenerSet translation: a Gateway takes the ListenerSets its `allowedListeners` allows,
//! their listeners after its own; routes reach a set's listeners through a parentRef to the
//! set alone; conflicts with the Gateway's listeners; status on both.

use super::*;

const SETS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: open, namespace: infra, generation: 4}
spec:
  gatewayClassName: sy
  allowedListeners: {namespaces: {from: All}}
  listeners:
  - {name: own, port: 80, protocol: HTTP, hostname: own.example.com}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: team, namespace: apps, generation: 2, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRef: {name: open, namespace: infra}
  listeners:
  - {name: team, port: 80, protocol: HTTP, hostname: team.example.com, allowedRoutes: {namespaces: {from: Same}}}
  - {name: clash, port: 80, protocol: HTTP, hostname: own.example.com}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: refused, namespace: apps}
spec:
  parentRef: {name: gw, namespace: infra}
  listeners:
  - {name: x, port: 80, protocol: HTTP, hostname: refused.example.com}
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: apps}
spec: {ports: [{port: 8080}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: through-set, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: team}]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: through-gateway, namespace: infra}
spec:
  parentRefs: [{name: open}]
  rules: [{matches: [{path: {type: PathPrefix, value: /gw}}], backendRefs: [{name: v1, port: 8080}]}]
"#;

fn set_status<'b>(b: &'b Built, name: &str) -> &'b ListenerSetStatus {
    &b.memo.gateway_status().listener_sets[&("apps".to_string(), name.to_string())]
}

fn condition(conditions: &[Condition], type_: &str) -> (String, String) {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap()
}

#[test]
fn a_gateway_takes_the_listener_sets_it_allows_and_routes_reach_them_through_the_set() {
    let (b, warnings) = build(&world(&format!("{BASE}\n---\n{SETS}")));
    let t = &b.table;
    // The set's listener serves its route; the Gateway's route does not reach it.
    assert_eq!(get(t, "team.example.com", "/any"), "apps/app:8080");
    assert_eq!(get(t, "team.example.com", "/gw"), "apps/app:8080");
    assert_eq!(get(t, "own.example.com", "/gw/x"), "infra/v1:8080");
    assert_eq!(get(t, "own.example.com", "/any"), "404");
    // The set's status: accepted (one listener conflicts), its listeners counted.
    let team = set_status(&b, "team");
    assert_eq!(
        condition(&team.conditions, "Accepted"),
        ("True".into(), "ListenersNotValid".into())
    );
    assert_eq!(team.conditions[0].observed_generation, Some(2));
    assert_eq!(team.listeners[0].name, "team");
    assert_eq!(team.listeners[0].attached_routes, 1);
    assert_eq!(
        condition(&team.listeners[1].conditions, "Conflicted"),
        ("True".into(), "HostnameConflict".into())
    );
    assert_eq!(
        condition(&team.listeners[1].conditions, "Accepted"),
        ("False".into(), "HostnameConflict".into())
    );
    // The route's parent status names the set.
    let r = &b.memo.gateway_status().http_routes[&("apps".to_string(), "through-set".to_string())];
    assert_eq!(r.parents[0].parent_ref.kind.as_deref(), Some("ListenerSet"));
    assert_eq!(
        (r.parents[0].conditions[0].status.as_str()),
        "True",
        "{:?}",
        r.parents[0].conditions
    );
    // The Gateway lists only its own listener, and counts the set.
    let gw = &b.memo.gateway_status().gateways[&("infra".to_string(), "open".to_string())];
    assert_eq!(gw.listeners.len(), 1);
    assert_eq!(gw.attached_listener_sets, Some(1));
    // `gw` allows none (the default): refused, and its hostname is not served.
    let refused = set_status(&b, "refused");
    assert_eq!(
        condition(&refused.conditions, "Accepted"),
        ("False".into(), "NotAllowed".into())
    );
    assert!(refused.listeners.is_empty());
    let gw = &b.memo.gateway_status().gateways[&("infra".to_string(), "gw".to_string())];
    assert_eq!(gw.attached_listener_sets, None);
    assert!(
        warnings
            .iter()
            .any(|w| w.object.name == "refused" && w.message.contains("allowedListeners"))
    );
}

#[test]
fn a_set_change_alone_builds_what_a_full_build_would() {
    let before = world(&format!("{BASE}\n---\n{SETS}"));
    let (b1, _) = build_changes(&before, None, None);
    let mut after = world(&format!("{BASE}\n---\n{SETS}"));
    after.listener_sets[0].spec.listeners[0].hostname = Some("renamed.example.com".into());
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    let (quick, wq) = build_changes(&after, Some(&told), Some(b1.previous()));
    let (full, wf) = build_changes(&after, None, Some(b1.previous()));
    assert!(quick.table == full.table);
    assert_eq!(wq, wf);
    assert_eq!(quick.memo.gateway_status(), full.memo.gateway_status());
    assert_eq!(
        get(&quick.table, "renamed.example.com", "/x"),
        "apps/app:8080"
    );
    // No longer the set's: the base Gateway's listener without a hostname takes it.
    assert_eq!(get(&quick.table, "team.example.com", "/x"), "404");
}

#[test]
fn a_set_whose_gateway_is_gone_is_not_accepted_and_one_of_another_class_is_left_alone() {
    const ORPHANS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: theirs, namespace: infra}
spec:
  gatewayClassName: someone-else
  allowedListeners: {namespaces: {from: All}}
  listeners:
  - {name: own, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: orphan, namespace: apps, generation: 3}
spec:
  parentRef: {name: deleted, namespace: infra}
  listeners:
  - {name: x, port: 80, protocol: HTTP, hostname: orphan.example.com}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: other, namespace: apps}
spec:
  parentRef: {name: theirs, namespace: infra}
  listeners:
  - {name: x, port: 80, protocol: HTTP, hostname: other.example.com}
"#;
    let (b, warnings) = build(&world(&format!("{BASE}\n---\n{ORPHANS}")));
    let orphan = set_status(&b, "orphan");
    assert_eq!(
        condition(&orphan.conditions, "Accepted"),
        ("False".into(), "ParentNotAccepted".into())
    );
    assert_eq!(
        condition(&orphan.conditions, "Programmed"),
        ("False".into(), "ParentNotProgrammed".into())
    );
    assert_eq!(orphan.conditions[0].observed_generation, Some(3));
    assert!(
        warnings.iter().any(
            |w| w.object.name == "orphan" && w.message.contains("infra/deleted does not exist")
        )
    );
    assert_eq!(get(&b.table, "orphan.example.com", "/"), "404");
    // Another class's Gateway: its controller's to judge, nothing written here.
    let statuses = &b.memo.gateway_status().listener_sets;
    assert!(!statuses.contains_key(&("apps".to_string(), "other".to_string())));
    assert!(!warnings.iter().any(|w| w.object.name == "other"));
}
