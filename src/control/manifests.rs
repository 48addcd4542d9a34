//! The offline source: Services and EndpointSlices (or v1 Endpoints), Ingresses,
//! IngressClasses, Secrets, ConfigMaps (their `ca.crt` alone), the Gateway API's
//! GatewayClasses, Gateways, HTTPRoutes, GRPCRoutes, TCPRoutes, TLSRoutes, UDPRoutes, ListenerSets, BackendTLSPolicies
//! and ReferenceGrants, and Namespaces (whose labels `allowedRoutes` selectors read) from Kubernetes YAML or JSON files, watched,
//! and fed through the same `Pipeline` as the cluster watcher.
//!
//! A file may hold several documents (`---`), a `kind: List`, or objects of other kinds (which
//! are ignored). A directory contributes its `.yaml`, `.yml` and `.json` files, skipping hidden
//! ones (so a mounted ConfigMap's `..data` copies are not read twice). Watching polls file
//! metadata; a change reloads everything, and a load that fails anywhere is reported with file,
//! document and reason while the last good table keeps serving. This module must not touch the
//! data plane.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::Resource;
use k8s_openapi::api::core::v1::{
    ConfigMap, EndpointAddress, Endpoints, Namespace, Secret, Service,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::value::MapDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

pub use crate::control::objects::Objects;
use crate::control::pipeline::Pipeline;
use crate::control::translate::SERVICE_NAME_LABEL;
use crate::control::translate::gateway::api::{
    self as gw, BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, ListenerSet,
    ReferenceGrant, TCPRoute, TLSRoute, UDPRoute,
};
use crate::table::upstream::CA_KEY;

/// How often the files are checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Why the manifests could not be loaded. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: document {document}: {reason}")]
    Parse {
        path: PathBuf,
        /// 1-based index of the document in the file.
        document: usize,
        reason: String,
    },
}

/// Reads every manifest under `paths`.
pub fn load(paths: &[PathBuf]) -> Result<Objects, ManifestError> {
    let mut objects = Objects::default();
    for file in list_files(paths)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ManifestError::Io {
            path: file.clone(),
            source,
        })?;
        parse_into(&text, &file, &mut objects)?;
    }
    Ok(objects)
}

/// Parses one file's text (YAML or JSON by extension) into `objects`.
///
/// Objects are deserialized straight into their typed form: a document is never held as a
/// generic value tree (a `serde_json::Value` costs about 35 bytes of heap per byte of JSON, so
/// a 7 MB manifest used to peak near 300 MB, and glibc kept most of it). See [`ObjectSeed`].
pub fn parse_into(text: &str, path: &Path, objects: &mut Objects) -> Result<(), ManifestError> {
    let err = |document: usize, reason: String| ManifestError::Parse {
        path: path.to_path_buf(),
        document,
        reason,
    };
    if path.extension().is_some_and(|e| e == "json") {
        let mut de = serde_json::Deserializer::from_str(text);
        let mut document = 0;
        // `end` only skips whitespace: it fails while another document follows.
        while de.end().is_err() {
            document += 1;
            let from = objects.unread.len();
            ObjectSeed { out: objects }
                .deserialize(&mut de)
                .map_err(|e| err(document, e.to_string()))?;
            locate(&mut objects.unread[from..], path, document);
        }
    } else {
        // The iterator may repeat an error forever, so stop at the first one.
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let from = objects.unread.len();
            ObjectSeed { out: objects }
                .deserialize(doc)
                .map_err(|e| err(i + 1, e.to_string()))?;
            locate(&mut objects.unread[from..], path, i + 1);
        }
    }
    Ok(())
}

/// Puts the file and document in front of the notes one document left.
fn locate(notes: &mut [String], path: &Path, document: usize) {
    for n in notes {
        *n = format!("{}: document {document}: {n}", path.display());
    }
}

/// The kinds switchyard reads, for a misspelt one.
const KINDS: [&str; 18] = [
    "Service",
    "EndpointSlice",
    "Endpoints",
    "Ingress",
    "IngressClass",
    "Secret",
    "ConfigMap",
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "TCPRoute",
    "TLSRoute",
    "UDPRoute",
    "ListenerSet",
    "BackendTLSPolicy",
    "ReferenceGrant",
    "Namespace",
];

/// The kind switchyard reads that `kind` is likely a misspelling of (at most two edits, any
/// case), if any: a kind no one spells that way is another API's, ignored without a word.
fn misspelt_kind(kind: &str) -> Option<&'static str> {
    KINDS
        .iter()
        .map(|k| {
            (
                edit_distance(&kind.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                *k,
            )
        })
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance (kinds are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Reads a `T` under key `at`, noting each path in it that `T` has no field for
/// (`spec.prots`) in `unread`.
struct Noted<'u, T> {
    at: &'static str,
    unread: &'u mut Vec<String>,
    of: std::marker::PhantomData<T>,
}

impl<'u, T> Noted<'u, T> {
    fn at(at: &'static str, unread: &'u mut Vec<String>) -> Self {
        Noted {
            at,
            unread,
            of: std::marker::PhantomData,
        }
    }
}

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for Noted<'_, T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        let (at, unread) = (self.at, self.unread);
        serde_ignored::deserialize(de, |path| {
            let mut out = at.to_string();
            dotted(&path, &mut out);
            unread.push(out);
        })
    }
}

/// `path` as `a.b.0.c` (serde_ignored writes an optional value's step as `?`).
fn dotted(path: &serde_ignored::Path<'_>, out: &mut String) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            dotted(parent, out);
            out.push('.');
            out.push_str(&index.to_string());
        }
        Path::Map { parent, key } => {
            dotted(parent, out);
            out.push('.');
            out.push_str(key);
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => {
            dotted(parent, out);
        }
    }
}

// === impl ObjectSeed ===

/// Deserializes one object (a document or a `List` item) into `out`, typed as it is read.
///
/// `kind` decides the type, but a map's keys come in any order: `kubectl -o yaml` sorts them,
/// so an EndpointSlice's `endpoints` and a List's `items` come before `kind`. Keys seen before
/// `kind` are therefore buffered (one object's worth, as `serde_json::Value`) and replayed with
/// `kind` first; `items` is the exception: it is read straight into a side `Objects` and kept
/// only if the object turns out to be a List. Fields routing never reads (`status`,
/// `metadata.managedFields`, the last-applied annotation) are skipped or dropped here, as the
/// cluster watcher drops them from its stores.
struct ObjectSeed<'a> {
    out: &'a mut Objects,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

/// Which typed object a map is being read into (boxed: a Service is 800 bytes on the stack).
enum Partial {
    Service(Box<Service>),
    Slice(Box<EndpointSlice>),
    Endpoints(Box<Endpoints>),
    Ingress(Box<Ingress>),
    Class(Box<IngressClass>),
    Secret(Box<Secret>),
    ConfigMap(Box<ConfigMap>),
    GatewayClass(Box<GatewayClass>),
    Gateway(Box<Gateway>),
    HTTPRoute(Box<HTTPRoute>),
    GRPCRoute(Box<GRPCRoute>),
    TCPRoute(Box<TCPRoute>),
    TLSRoute(Box<TLSRoute>),
    UDPRoute(Box<UDPRoute>),
    ListenerSet(Box<ListenerSet>),
    BackendTLSPolicy(Box<BackendTLSPolicy>),
    ReferenceGrant(Box<ReferenceGrant>),
    Namespace(Box<Namespace>),
    /// A `List` (or `*List`): only `items` is read.
    List,
    /// Another kind: everything is skipped.
    Other,
}

impl Partial {
    /// The object's `namespace/name` (`default` when it names no namespace), for a note.
    fn name(&self) -> String {
        let meta = match self {
            Partial::Service(o) => &o.metadata,
            Partial::Slice(o) => &o.metadata,
            Partial::Endpoints(o) => &o.metadata,
            Partial::Ingress(o) => &o.metadata,
            Partial::Class(o) => &o.metadata,
            Partial::Secret(o) => &o.metadata,
            Partial::ConfigMap(o) => &o.metadata,
            Partial::GatewayClass(o) => &o.metadata,
            Partial::Gateway(o) => &o.metadata,
            Partial::HTTPRoute(o) => &o.metadata,
            Partial::GRPCRoute(o) => &o.metadata,
            Partial::TCPRoute(o) => &o.metadata,
            Partial::TLSRoute(o) => &o.metadata,
            Partial::UDPRoute(o) => &o.metadata,
            Partial::ListenerSet(o) => &o.metadata,
            Partial::BackendTLSPolicy(o) => &o.metadata,
            Partial::ReferenceGrant(o) => &o.metadata,
            Partial::Namespace(o) => &o.metadata,
            Partial::List | Partial::Other => return String::new(),
        };
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or("")
        )
    }

    fn for_kind(kind: &str) -> Partial {
        match kind {
            "Service" => Partial::Service(Box::default()),
            "EndpointSlice" => Partial::Slice(Box::default()),
            "Endpoints" => Partial::Endpoints(Box::default()),
            "Ingress" => Partial::Ingress(Box::default()),
            "IngressClass" => Partial::Class(Box::default()),
            "Secret" => Partial::Secret(Box::default()),
            "ConfigMap" => Partial::ConfigMap(Box::default()),
            "GatewayClass" => Partial::GatewayClass(Box::default()),
            "Gateway" => Partial::Gateway(Box::default()),
            "HTTPRoute" => Partial::HTTPRoute(Box::default()),
            "GRPCRoute" => Partial::GRPCRoute(Box::default()),
            "TCPRoute" => Partial::TCPRoute(Box::default()),
            "TLSRoute" => Partial::TLSRoute(Box::default()),
            "UDPRoute" => Partial::UDPRoute(Box::default()),
            "ListenerSet" => Partial::ListenerSet(Box::default()),
            "BackendTLSPolicy" => Partial::BackendTLSPolicy(Box::default()),
            "ReferenceGrant" => Partial::ReferenceGrant(Box::default()),
            "Namespace" => Partial::Namespace(Box::default()),
            k if k == "List" || k.ends_with("List") => Partial::List,
            _ => Partial::Other,
        }
    }
}

/// What an `items` value turned out to be.
enum Items {
    /// Boxed: `Objects` is ten vectors, and the other variants are empty.
    List(Box<Objects>),
    /// Absent or null: an empty list.
    Null,
    NotAList,
}

impl<'de> Visitor<'de> for ObjectSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    /// An empty document (`---` followed by nothing).
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut kind: Option<(String, Partial)> = None;
        let mut api_version: Option<String> = None;
        // Keys read before `kind`, replayed once it is known.
        let mut early: Vec<(String, Value)> = Vec::new();
        let mut items: Option<Items> = None;
        // Paths of this object that its type has no field for.
        let mut unread: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match (key.as_str(), kind.as_mut()) {
                ("kind", None) => {
                    let k: String = map.next_value()?;
                    let partial = Partial::for_kind(&k);
                    kind = Some((k, partial));
                }
                ("apiVersion", _) => api_version = Some(map.next_value()?),
                ("items", None | Some((_, Partial::List))) => {
                    items = Some(map.next_value_seed(ItemsSeed)?);
                }
                (_, None) => early.push((key, map.next_value()?)),
                (_, Some((k, partial))) => {
                    field(partial, &key, &mut map, &mut unread).map_err(|e| invalid(k, e))?;
                }
            }
        }
        let Some((kind, mut partial)) = kind else {
            return Err(de::Error::custom("not a Kubernetes object: no `kind`"));
        };
        for (key, value) in early {
            replay(&mut partial, &key, value, &mut unread).map_err(|e| invalid(&kind, e))?;
        }
        if matches!(partial, Partial::Other)
            && let Some(meant) = misspelt_kind(&kind)
        {
            self.out.unread.push(format!(
                "kind {kind} is not one switchyard reads (did you mean {meant}?); the object is \
                 ignored"
            ));
        }
        if !unread.is_empty() && !matches!(partial, Partial::Other | Partial::List) {
            self.out.unread.push(format!(
                "{kind} {}: {}: not {} switchyard knows in {kind} (misspelt, or not served); \
                 ignored",
                partial.name(),
                unread.join(", "),
                if unread.len() == 1 {
                    "a field"
                } else {
                    "fields"
                }
            ));
        }
        if let Some(v) = &api_version {
            if foreign_group(&partial, v) {
                // Another API's kind of the same name (Istio's `networking.istio.io` Gateway):
                // not ours to read, as any other kind.
                tracing::debug!(
                    kind,
                    api_version = v,
                    "ignoring object of another API group"
                );
                return Ok(());
            }
            check_api_version(&partial, v).map_err(|e| invalid(&kind, e))?;
        }
        let out = self.out;
        match partial {
            Partial::Service(mut s) => {
                slim(&mut s.metadata);
                out.services.push(*s);
            }
            Partial::Slice(mut s) => {
                slim(&mut s.metadata);
                out.slices.push(*s);
            }
            Partial::Endpoints(ep) => out.slices.extend(slices_from_endpoints(&ep)),
            Partial::Ingress(mut i) => {
                slim(&mut i.metadata);
                out.ingresses.push(*i);
            }
            Partial::Class(mut c) => {
                slim(&mut c.metadata);
                out.classes.push(*c);
            }
            Partial::Secret(mut s) => {
                slim(&mut s.metadata);
                // `stringData` is write-only in the API (merged into `data`); here it is the
                // file's way of writing PEM without base64.
                if let Some(text) = s.string_data.take() {
                    let data = s.data.get_or_insert_with(Default::default);
                    for (k, v) in text {
                        data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
                    }
                }
                out.secrets.push(*s);
            }
            Partial::ConfigMap(mut c) => {
                // Only a CA bundle is read from a ConfigMap, as the cluster source keeps them.
                slim(&mut c.metadata);
                c.metadata.annotations = None;
                if let Some(d) = c.data.as_mut() {
                    d.retain(|k, _| k == CA_KEY);
                }
                if let Some(d) = c.binary_data.as_mut() {
                    d.retain(|k, _| k == CA_KEY);
                }
                let holds_ca = c.data.as_ref().is_some_and(|d| !d.is_empty())
                    || c.binary_data.as_ref().is_some_and(|d| !d.is_empty());
                if holds_ca {
                    out.config_maps.push(*c);
                }
            }
            Partial::GatewayClass(mut c) => {
                slim(&mut c.metadata);
                out.gateway_classes.push(*c);
            }
            Partial::Gateway(mut g) => {
                slim(&mut g.metadata);
                out.gateways.push(*g);
            }
            Partial::HTTPRoute(mut r) => {
                slim(&mut r.metadata);
                out.http_routes.push(*r);
            }
            Partial::GRPCRoute(mut r) => {
                slim(&mut r.metadata);
                out.grpc_routes.push(*r);
            }
            Partial::TCPRoute(mut r) => {
                slim(&mut r.metadata);
                out.tcp_routes.push(*r);
            }
            Partial::TLSRoute(mut r) => {
                slim(&mut r.metadata);
                out.tls_routes.push(*r);
            }
            Partial::UDPRoute(mut r) => {
                slim(&mut r.metadata);
                out.udp_routes.push(*r);
            }
            Partial::ListenerSet(mut l) => {
                slim(&mut l.metadata);
                out.listener_sets.push(*l);
            }
            Partial::BackendTLSPolicy(mut p) => {
                slim(&mut p.metadata);
                out.backend_tls_policies.push(*p);
            }
            Partial::ReferenceGrant(mut g) => {
                slim(&mut g.metadata);
                out.reference_grants.push(*g);
            }
            Partial::Namespace(mut n) => {
                slim(&mut n.metadata);
                out.namespaces.push(*n);
            }
            Partial::List => match items {
                Some(Items::List(objects)) => out.extend(*objects),
                Some(Items::Null) | None => {}
                Some(Items::NotAList) => {
                    return Err(de::Error::custom(format!("{kind}: `items` is not a list")));
                }
            },
            Partial::Other => tracing::debug!(kind, "ignoring object of another kind"),
        }
        Ok(())
    }
}

fn invalid<E: de::Error>(kind: &str, e: impl fmt::Display) -> E {
    E::custom(format!("invalid {kind}: {e}"))
}

/// Reads the value of `key` from `map` into the object being built.
fn field<'de, A: MapAccess<'de>>(
    partial: &mut Partial,
    key: &str,
    map: &mut A,
    unread: &mut Vec<String>,
) -> Result<(), A::Error> {
    match (partial, key) {
        (Partial::Service(s), "metadata") => s.metadata = map.next_value()?,
        (Partial::Service(s), "spec") => s.spec = map.next_value_seed(Noted::at("spec", unread))?,
        (Partial::Slice(s), "metadata") => s.metadata = map.next_value()?,
        (Partial::Slice(s), "addressType") => s.address_type = map.next_value()?,
        (Partial::Slice(s), "endpoints") => {
            s.endpoints = map.next_value_seed(Noted::at("endpoints", unread))?;
        }
        (Partial::Slice(s), "ports") => {
            s.ports = map.next_value_seed(Noted::at("ports", unread))?
        }
        (Partial::Endpoints(e), "metadata") => e.metadata = map.next_value()?,
        (Partial::Endpoints(e), "subsets") => {
            e.subsets = map.next_value_seed(Noted::at("subsets", unread))?;
        }
        (Partial::Ingress(i), "metadata") => i.metadata = map.next_value()?,
        (Partial::Ingress(i), "spec") => i.spec = map.next_value_seed(Noted::at("spec", unread))?,
        (Partial::Class(c), "metadata") => c.metadata = map.next_value()?,
        (Partial::Class(c), "spec") => c.spec = map.next_value_seed(Noted::at("spec", unread))?,
        (Partial::Secret(s), "metadata") => s.metadata = map.next_value()?,
        (Partial::Secret(s), "type") => s.type_ = map.next_value()?,
        (Partial::Secret(s), "data") => s.data = map.next_value()?,
        (Partial::Secret(s), "stringData") => s.string_data = map.next_value()?,
        (Partial::ConfigMap(c), "metadata") => c.metadata = map.next_value()?,
        (Partial::ConfigMap(c), "data") => c.data = map.next_value()?,
        (Partial::ConfigMap(c), "binaryData") => c.binary_data = map.next_value()?,
        (Partial::GatewayClass(c), "metadata") => c.metadata = map.next_value()?,
        (Partial::GatewayClass(c), "spec") => {
            c.spec = map.next_value_seed(Noted::at("spec", unread))?;
        }
        (Partial::Gateway(g), "metadata") => g.metadata = map.next_value()?,
        (Partial::Gateway(g), "spec") => g.spec = map.next_value_seed(Noted::at("spec", unread))?,
        (Partial::HTTPRoute(r), "metadata") => r.metadata = map.next_value()?,
        (Partial::HTTPRoute(r), "spec") => {
            r.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::GRPCRoute(r), "metadata") => r.metadata = map.next_value()?,
        (Partial::GRPCRoute(r), "spec") => {
            r.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::TCPRoute(r), "metadata") => r.metadata = map.next_value()?,
        (Partial::TCPRoute(r), "spec") => {
            r.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::TLSRoute(r), "metadata") => r.metadata = map.next_value()?,
        (Partial::TLSRoute(r), "spec") => {
            r.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::UDPRoute(r), "metadata") => r.metadata = map.next_value()?,
        (Partial::UDPRoute(r), "spec") => {
            r.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::ListenerSet(l), "metadata") => l.metadata = map.next_value()?,
        (Partial::ListenerSet(l), "spec") => {
            l.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::BackendTLSPolicy(p), "metadata") => p.metadata = map.next_value()?,
        (Partial::BackendTLSPolicy(p), "spec") => {
            p.spec = map.next_value_seed(Noted::at("spec", unread))?
        }
        (Partial::ReferenceGrant(g), "metadata") => g.metadata = map.next_value()?,
        (Partial::ReferenceGrant(g), "spec") => {
            g.spec = map.next_value_seed(Noted::at("spec", unread))?;
        }
        // Only the labels matter (allowedRoutes selectors); spec and status are skipped.
        (Partial::Namespace(n), "metadata") => n.metadata = map.next_value()?,
        // `status`, a repeated `kind`, other kinds' fields: read past without building them.
        (partial, key) => {
            map.next_value::<IgnoredAny>()?;
            if !matches!(
                partial,
                Partial::Other | Partial::List | Partial::Namespace(_)
            ) && !matches!(key, "status" | "kind" | "immutable")
            {
                unread.push(key.to_string());
            }
        }
    }
    Ok(())
}

/// `field` for a key that was buffered before `kind` was known.
fn replay(
    partial: &mut Partial,
    key: &str,
    value: Value,
    unread: &mut Vec<String>,
) -> Result<(), serde_json::Error> {
    let mut one = MapDeserializer::new(std::iter::once((key, value)));
    if one.next_key::<IgnoredAny>()?.is_some() {
        field(partial, key, &mut one, unread)?;
    }
    one.end()
}

/// The `apiVersion` check k8s-openapi makes when it reads an object itself.
fn check_api_version(partial: &Partial, version: &str) -> Result<(), String> {
    let expected = match partial {
        Partial::Service(_) => Service::API_VERSION,
        Partial::Slice(_) => EndpointSlice::API_VERSION,
        Partial::Endpoints(_) => Endpoints::API_VERSION,
        Partial::Ingress(_) => Ingress::API_VERSION,
        Partial::Class(_) => IngressClass::API_VERSION,
        Partial::Secret(_) => Secret::API_VERSION,
        Partial::ConfigMap(_) => ConfigMap::API_VERSION,
        Partial::Namespace(_) => Namespace::API_VERSION,
        // The CRDs serve GatewayClass, Gateway and HTTPRoute at v1 and v1beta1, ReferenceGrant
        // at v1beta1 and v1, all with one schema: any served version reads the same.
        Partial::GatewayClass(_)
        | Partial::Gateway(_)
        | Partial::HTTPRoute(_)
        | Partial::ReferenceGrant(_) => {
            return match version.strip_prefix(gw::GROUP) {
                Some("/v1" | "/v1beta1") => Ok(()),
                _ => Err(format!(
                    "apiVersion {version:?}, expected {g}/v1 or {g}/v1beta1",
                    g = gw::GROUP
                )),
            };
        }
        // The standard channel serves GRPCRoute at v1 alone (v1alpha2 is experimental).
        Partial::GRPCRoute(_) => {
            return match version.strip_prefix(gw::GROUP) {
                Some("/v1") => Ok(()),
                _ => Err(format!(
                    "apiVersion {version:?}, expected {g}/v1",
                    g = gw::GROUP
                )),
            };
        }
        // The standard channel serves them at v1; their earlier experimental versions have
        // the same fields, and manifests written for them are common: read alike.
        // BackendTLSPolicy's v1alpha3 has the same fields as its v1.
        Partial::TCPRoute(_)
        | Partial::TLSRoute(_)
        | Partial::UDPRoute(_)
        | Partial::ListenerSet(_)
        | Partial::BackendTLSPolicy(_) => {
            return match version.strip_prefix(gw::GROUP) {
                Some("/v1" | "/v1alpha2" | "/v1alpha3") => Ok(()),
                _ => Err(format!(
                    "apiVersion {version:?}, expected {g}/v1 (or v1alpha2)",
                    g = gw::GROUP
                )),
            };
        }
        Partial::List | Partial::Other => return Ok(()),
    };
    if version == expected {
        Ok(())
    } else {
        Err(format!("apiVersion {version:?}, expected {expected:?}"))
    }
}

/// A Gateway API kind's name in an apiVersion of another group, which is some other API's
/// object, not a malformed one of ours.
fn foreign_group(partial: &Partial, version: &str) -> bool {
    let ours = matches!(
        partial,
        Partial::GatewayClass(_)
            | Partial::Gateway(_)
            | Partial::HTTPRoute(_)
            | Partial::GRPCRoute(_)
            | Partial::TCPRoute(_)
            | Partial::TLSRoute(_)
            | Partial::UDPRoute(_)
            | Partial::ListenerSet(_)
            | Partial::BackendTLSPolicy(_)
            | Partial::ReferenceGrant(_)
    );
    ours && version
        .split_once('/')
        .is_none_or(|(group, _)| group != gw::GROUP)
}

/// Drops what routing never reads (as the cluster watcher does for its stores).
fn slim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// `kubectl apply`'s copy of the whole object, often larger than the object itself.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Reads a List's `items`, each through `ObjectSeed`.
struct ItemsSeed;

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = Items;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Items, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Items, S::Error> {
        let mut objects = Objects::default();
        let mut n = 0;
        loop {
            n += 1;
            let item = seq
                .next_element_seed(ObjectSeed { out: &mut objects })
                .map_err(|e| de::Error::custom(format!("item {n}: {e}")))?;
            if item.is_none() {
                return Ok(Items::List(Box::new(objects)));
            }
        }
    }

    fn visit_unit<E: de::Error>(self) -> Result<Items, E> {
        Ok(Items::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Items, E> {
        Ok(Items::Null)
    }

    // Anything else is an error only if the object is a List, which may not be known yet.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Items::NotAList)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Items, E> {
        Ok(Items::NotAList)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Items, E> {
        Ok(Items::NotAList)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Items, E> {
        Ok(Items::NotAList)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Items, E> {
        Ok(Items::NotAList)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Items, E> {
        Ok(Items::NotAList)
    }
}

/// Converts hand-written v1 Endpoints into EndpointSlices, one per subset.
fn slices_from_endpoints(ep: &Endpoints) -> Vec<EndpointSlice> {
    let name = ep.metadata.name.clone().unwrap_or_default();
    let mut out = Vec::new();
    for (i, subset) in ep.subsets.iter().flatten().enumerate() {
        fn mk(
            addrs: &Option<Vec<EndpointAddress>>,
            ready: bool,
        ) -> impl Iterator<Item = Endpoint> + '_ {
            addrs.iter().flatten().map(move |a| Endpoint {
                addresses: vec![a.ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    ..Default::default()
                }),
                hostname: a.hostname.clone(),
                ..Default::default()
            })
        }
        let endpoints: Vec<Endpoint> = mk(&subset.addresses, true)
            .chain(mk(&subset.not_ready_addresses, false))
            .collect();
        let v6 = endpoints
            .first()
            .and_then(|e| e.addresses.first())
            .and_then(|a| a.parse::<IpAddr>().ok())
            .is_some_and(|ip| ip.is_ipv6());
        out.push(EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{}", i + 1)),
                namespace: ep.metadata.namespace.clone(),
                labels: Some(BTreeMap::from([(
                    SERVICE_NAME_LABEL.to_string(),
                    name.clone(),
                )])),
                ..Default::default()
            },
            address_type: if v6 { "IPv6" } else { "IPv4" }.into(),
            endpoints: Some(endpoints),
            ports: Some(
                subset
                    .ports
                    .iter()
                    .flatten()
                    .map(|p| EndpointPort {
                        name: p.name.clone(),
                        port: Some(p.port),
                        protocol: p.protocol.clone(),
                        app_protocol: p.app_protocol.clone(),
                    })
                    .collect(),
            ),
        });
    }
    out
}

fn is_manifest(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'));
    !hidden
        && path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// The files named by `paths`: files as given, directories' manifest files sorted by name.
fn list_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ManifestError> {
    let mut files = Vec::new();
    for path in paths {
        let io = |source| ManifestError::Io {
            path: path.clone(),
            source,
        };
        if std::fs::metadata(path).map_err(io)?.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(io)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_manifest(p) && p.is_file())
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// What identifies the current state of the inputs: every file with its size, mtime and inode.
/// Any difference triggers a reload.
type Fingerprint = Vec<(PathBuf, Option<(u64, SystemTime, u64)>)>;

fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    use std::os::unix::fs::MetadataExt;
    let files = list_files(paths).unwrap_or_else(|_| paths.to_vec());
    files
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(&f).ok().map(|m| {
                (
                    m.len(),
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    m.ino(),
                )
            });
            (f, meta)
        })
        .collect()
}

/// Watches `paths` and publishes a table on every change until `shutdown` turns true.
pub async fn watch(
    paths: Vec<PathBuf>,
    mut pipeline: Pipeline,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut last: Option<Fingerprint> = None;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
        }
        let fp = fingerprint(&paths);
        if last.as_ref() == Some(&fp) {
            continue;
        }
        last = Some(fp);
        match load(&paths) {
            Ok(objects) => {
                // Logged at each load (a file changed): a typo is named until it is fixed.
                for note in &objects.unread {
                    tracing::warn!("{note}");
                }
                let refs = objects.ingress_refs();
                pipeline.apply_with(&objects.services, &objects.slices, refs.inputs());
            }
            Err(e) => {
                tracing::error!(error = %e, "manifests not applied; the last good table keeps serving");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, name: &str) -> Result<Objects, ManifestError> {
        let mut o = Objects::default();
        parse_into(text, Path::new(name), &mut o).map(|()| o)
    }

    #[test]
    fn fields_and_kinds_that_are_misspelt_are_named() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
                    spec:\n  prots: [{port: 80}]\n  ports: [{port: 81, nmae: x}]\nsepc: {}\n\
                    status: {}\n---\napiVersion: v1\nkind: Servce\nmetadata: {name: a}\n---\n\
                    apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {x: 1}\n\
                    ---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: i}\n\
                    spec:\n  rules: [{host: a.test, htp: {}}]\n";
        let o = parse(text, "m.yaml").unwrap();
        assert_eq!(o.services.len(), 1, "the object is still read");
        assert_eq!(
            o.unread,
            [
                "m.yaml: document 1: Service shop/web: spec.prots, spec.ports.0.nmae, sepc: \
                 not fields switchyard knows in Service (misspelt, or not served); ignored",
                "m.yaml: document 2: kind Servce is not one switchyard reads (did you mean \
                 Service?); the object is ignored",
                "m.yaml: document 4: Ingress default/i: spec.rules.0.htp: not a field \
                 switchyard knows in Ingress (misspelt, or not served); ignored",
            ]
        );
        // Objects of other kinds, and well-formed ones, leave no note.
        let clean = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: \
                     [{port: 80}]\nstatus: {loadBalancer: {}}\n---\nkind: PodDisruptionBudget\n";
        assert!(parse(clean, "c.yaml").unwrap().unread.is_empty());
    }

    const SVC: &str =
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: [{port: 80}]\n";

    #[test]
    fn multi_document_yaml_with_other_kinds() {
        let text = format!(
            "{SVC}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: x}}\n---\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  \
             labels: {{kubernetes.io/service-name: web}}\naddressType: IPv4\n\
             endpoints: [{{addresses: [10.0.0.1]}}]\nports: [{{port: 8080}}]\n"
        );
        let o = parse(&text, "a.yaml").unwrap();
        assert_eq!(o.services.len(), 1);
        assert_eq!(o.slices.len(), 1);
    }

    #[test]
    fn config_maps_keep_their_ca_crt_alone() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: trust, namespace: shop, \
                    annotations: {a: b}}\ndata: {ca.crt: PEM, nginx.conf: big}\n---\n\
                    apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {x: y}\n";
        let o = parse(text, "c.yaml").unwrap();
        assert_eq!(o.config_maps.len(), 1, "one without ca.crt is not kept");
        let cm = &o.config_maps[0];
        assert_eq!(cm.metadata.name.as_deref(), Some("trust"));
        assert_eq!(
            cm.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
            ["ca.crt"]
        );
        assert_eq!(cm.metadata.annotations, None);
        assert_eq!(o.ingress_refs().config_maps.len(), 1);
    }

    #[test]
    fn list_kind_and_json() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80}]}},
            {"apiVersion":"v1","kind":"ServiceList","items":[
              {"apiVersion":"v1","kind":"Service","metadata":{"name":"b"},"spec":{}}]}]}"#;
        let o = parse(json, "l.json").unwrap();
        assert_eq!(o.services.len(), 2);
    }

    #[test]
    fn endpoints_become_slices() {
        let text = "apiVersion: v1\nkind: Endpoints\nmetadata: {name: web, namespace: shop}\nsubsets:\n\
                    - addresses: [{ip: 10.0.0.1}]\n  notReadyAddresses: [{ip: 10.0.0.2}]\n  ports: [{name: http, port: 8080}]\n";
        let o = parse(text, "e.yaml").unwrap();
        let s = &o.slices[0];
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()[SERVICE_NAME_LABEL],
            "web"
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("shop"));
        let eps = s.endpoints.as_ref().unwrap();
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[1].conditions.as_ref().unwrap().ready, Some(false));
    }

    #[test]
    fn errors_name_file_and_document() {
        let text = format!("{SVC}---\nkind: Service\nmetadata: {{name: [oops]}}\n");
        let e = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(
            e.starts_with("bad.yaml: document 2: invalid Service"),
            "{e}"
        );
        let e = parse("a: [unclosed", "syntax.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("syntax.yaml: document 1:"), "{e}");
        let e = parse("just: a map\n", "nokind.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no `kind`"), "{e}");
    }

    #[test]
    fn keys_in_any_order_as_kubectl_sorts_them() {
        // `kubectl get -o json` order: a List's items and a slice's endpoints before `kind`.
        let json = r#"{"apiVersion":"v1","items":[
            {"addressType":"IPv4","apiVersion":"discovery.k8s.io/v1",
             "endpoints":[{"addresses":["10.0.0.1"]}],"kind":"EndpointSlice",
             "metadata":{"name":"web-1","labels":{"kubernetes.io/service-name":"web"}},
             "ports":[{"port":8080}]},
            {"metadata":{"name":"web"},"spec":{"ports":[{"port":80}]},"kind":"Service"}],
            "kind":"List","metadata":{}}"#;
        let o = parse(json, "l.json").unwrap();
        assert_eq!(o.services.len(), 1);
        assert_eq!(o.services[0].metadata.name.as_deref(), Some("web"));
        assert_eq!(o.slices.len(), 1);
        assert_eq!(o.slices[0].address_type, "IPv4");
        assert_eq!(o.slices[0].endpoints.as_ref().unwrap().len(), 1);
        // An object of another kind may have an `items` that is anything.
        let o = parse(
            "items: 3\nkind: Deployment\n---\nitems: {a: 1}\nkind: Foo\n",
            "x.yaml",
        );
        assert_eq!(o.unwrap().services.len(), 0);
        let e = parse("items: 3\nkind: List\n", "x.yaml").unwrap_err();
        assert!(e.to_string().contains("`items` is not a list"), "{e}");
    }

    #[test]
    fn what_routing_never_reads_is_dropped() {
        let text = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  managedFields: \
                    [{manager: kubectl, fieldsV1: {f:spec: {}}}]\n  annotations:\n    \
                    kubectl.kubernetes.io/last-applied-configuration: '{}'\n    \
                    serviceloadbalancer/lb.host: a.test\nspec: {ports: [{port: 80}]}\n\
                    status: {loadBalancer: {ingress: [{ip: 1.2.3.4}]}}\n";
        let o = parse(text, "s.yaml").unwrap();
        let s = &o.services[0];
        assert!(s.metadata.managed_fields.is_none());
        assert_eq!(s.metadata.annotations.as_ref().unwrap().len(), 1);
        assert!(s.status.is_none());
        assert_eq!(s.spec.as_ref().unwrap().ports.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn api_version_is_checked_wherever_it_comes() {
        for text in [
            "apiVersion: v2\nkind: Service\nmetadata: {name: a}\n",
            "kind: Service\nmetadata: {name: a}\napiVersion: v2\n",
            "metadata: {name: a}\napiVersion: v2\nkind: Service\n",
        ] {
            let e = parse(text, "v.yaml").unwrap_err().to_string();
            assert!(e.contains("invalid Service"), "{e}");
        }
        // Without an apiVersion the kind alone decides, as before.
        assert_eq!(
            parse("kind: Service\n", "k.yaml").unwrap().services.len(),
            1
        );
    }

    #[test]
    fn directories_are_read_sorted_skipping_hidden_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.yaml"), SVC.replace("web", "b")).unwrap();
        std::fs::write(dir.path().join("a.yml"), SVC.replace("web", "a")).unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), SVC.replace("web", "h")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not yaml: [").unwrap();
        let o = load(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<_> = o
            .services
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(load(&[dir.path().join("missing.yaml")]).is_err());
    }

    #[test]
    fn fingerprint_changes_on_edit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.yaml");
        std::fs::write(&f, SVC).unwrap();
        let before = fingerprint(&[dir.path().to_path_buf()]);
        std::fs::write(&f, format!("{SVC}# edited\n")).unwrap();
        assert_ne!(before, fingerprint(&[dir.path().to_path_buf()]));
    }

    const GATEWAY_API: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: switchyard}
spec: {controllerName: switchyard.io/gateway-controller}
status: {conditions: [{type: Accepted, status: 'True', reason: Accepted, message: ''}]}
---
kind: Gateway
apiVersion: gateway.networking.k8s.io/v1
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: switchyard
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: shop}}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  hostnames: [shop.example.com]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: from-routes, namespace: certs}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: infra}]
  to: [{group: '', kind: Secret}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: v1-grant, namespace: certs}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop}]
  to: [{group: '', kind: Service, name: web}]
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
spec: {finalizers: [kubernetes]}
status: {phase: Active}
";

    #[test]
    fn gateway_api_objects_and_namespaces_are_read() {
        let o = parse(GATEWAY_API, "gw.yaml").unwrap();
        assert_eq!(o.gateway_classes.len(), 1);
        assert_eq!(
            o.gateway_classes[0].spec.controller_name,
            "switchyard.io/gateway-controller"
        );
        // Status is the API server's, not the file's: never read.
        assert_eq!(o.gateway_classes[0].status, None);
        let listeners = &o.gateways[0].spec.listeners;
        assert_eq!(
            (listeners[0].name.as_str(), listeners[0].port),
            ("http", 80)
        );
        assert_eq!(
            o.http_routes[0].spec.parent_refs[0].namespace.as_deref(),
            Some("infra")
        );
        assert_eq!(o.http_routes[0].spec.rules.as_ref().map(Vec::len), Some(1));
        // Both served versions of ReferenceGrant.
        let grants: Vec<_> = o
            .reference_grants
            .iter()
            .map(|g| g.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(grants, ["from-routes", "v1-grant"]);
        assert_eq!(
            o.reference_grants[1].spec.to[0].name.as_deref(),
            Some("web")
        );
        assert_eq!(
            o.namespaces[0].metadata.labels.as_ref().unwrap()["team"],
            "shop"
        );
        // They reach translate with the Ingress side.
        let refs = o.ingress_refs();
        let inputs = refs.inputs();
        assert_eq!(
            (
                inputs.gateway.classes.len(),
                inputs.gateway.gateways.len(),
                inputs.gateway.routes.len(),
                inputs.gateway.grants.len(),
                inputs.gateway.namespaces.len()
            ),
            (1, 1, 1, 2, 1)
        );
    }

    #[test]
    fn gateway_api_kinds_in_lists_and_json() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[
            {"kind":"HTTPRouteList","apiVersion":"gateway.networking.k8s.io/v1","items":[
              {"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute",
               "metadata":{"name":"a","namespace":"x"},"spec":{"parentRefs":[{"name":"gw"}]}}]},
            {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}]}"#;
        let o = parse(json, "l.json").unwrap();
        assert_eq!(o.http_routes.len(), 1);
        // No rules: absent, not an empty list (the CRD's default is one catch-all rule).
        assert_eq!(o.http_routes[0].spec.rules, None);
        assert_eq!(o.namespaces.len(), 1);
    }

    #[test]
    fn grpc_routes_are_read_at_v1_alone_and_reach_translate() {
        let yaml = "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\n\
                    metadata: {name: g, namespace: x}\nspec:\n  parentRefs: [{name: gw}]\n  \
                    rules: [{matches: [{method: {service: a.B, method: C}}], \
                    backendRefs: [{name: s, port: 8080}]}]\n  tiemouts: {}\n";
        let o = parse(yaml, "g.yaml").unwrap();
        assert_eq!(o.grpc_routes.len(), 1);
        let m = &o.grpc_routes[0].spec.rules[0].matches[0];
        assert_eq!(
            m.method.as_ref().and_then(|m| m.service.as_deref()),
            Some("a.B")
        );
        // A misspelt field is noted, as for every kind.
        assert!(
            o.unread.iter().any(|n| n.contains("tiemouts")),
            "{:?}",
            o.unread
        );
        let refs = o.ingress_refs();
        assert_eq!(refs.inputs().gateway.grpc_routes.len(), 1);
        // The standard channel serves GRPCRoute at v1 only.
        let beta = yaml.replace("/v1\n", "/v1beta1\n");
        let e = parse(&beta, "beta.yaml").unwrap_err().to_string();
        assert!(e.contains("invalid GRPCRoute: apiVersion"), "{e}");
        // A misspelt kind is pointed at.
        let typo = yaml.replace("kind: GRPCRoute", "kind: GRPCRoutee");
        let o = parse(&typo, "typo.yaml").unwrap();
        assert!(
            o.unread.iter().any(|n| n.contains("GRPCRoute")),
            "{:?}",
            o.unread
        );
    }

    #[test]
    fn gateway_api_versions_are_checked_and_other_groups_ignored() {
        let istio = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: i}\n\
                     spec: {selector: {istio: ingressgateway}}\n";
        let o = parse(istio, "istio.yaml").unwrap();
        assert!(o.gateways.is_empty(), "another API's Gateway is not ours");
        let alpha = "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: HTTPRoute\n\
                     metadata: {name: r}\nspec: {}\n";
        let e = parse(alpha, "alpha.yaml").unwrap_err().to_string();
        assert!(e.contains("invalid HTTPRoute: apiVersion"), "{e}");
        let beta = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: Gateway\n\
                    metadata: {name: g}\nspec: {gatewayClassName: c}\n";
        assert_eq!(parse(beta, "beta.yaml").unwrap().gateways.len(), 1);
        let bad = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
                   metadata: {name: g}\nspec: {listeners: [{name: a, port: eighty}]}\n";
        let e = parse(bad, "bad.yaml").unwrap_err().to_string();
        assert!(
            e.starts_with("bad.yaml: document 1: invalid Gateway"),
            "{e}"
        );
    }

    #[test]
    fn an_edited_route_is_read_again() {
        // The watch reloads everything when the fingerprint changes; the reload must see the
        // edit (a new hostname) and a deleted file's objects must be gone.
        let dir = tempfile::tempdir().unwrap();
        let route = dir.path().join("route.yaml");
        let ns = dir.path().join("ns.yaml");
        std::fs::write(&route, GATEWAY_API).unwrap();
        std::fs::write(
            &ns,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
        )
        .unwrap();
        let paths = [dir.path().to_path_buf()];
        let before = fingerprint(&paths);
        let o = load(&paths).unwrap();
        assert_eq!(o.http_routes[0].spec.hostnames, ["shop.example.com"]);
        assert_eq!(o.namespaces.len(), 2);
        std::fs::write(
            &route,
            GATEWAY_API.replace("shop.example.com", "new.example.com"),
        )
        .unwrap();
        std::fs::remove_file(&ns).unwrap();
        assert_ne!(before, fingerprint(&paths));
        let o = load(&paths).unwrap();
        assert_eq!(o.http_routes[0].spec.hostnames, ["new.example.com"]);
        assert_eq!(o.namespaces.len(), 1);
    }
}
