//! The offline source: Services and EndpointSlices (or v1 Endpoints) read from Kubernetes YAML
//! or JSON files, watched, and fed through the same `Pipeline` as the cluster watcher.
//!
//! A file may hold several documents (`---`), a `kind: List`, or objects of other kinds (which
//! are ignored). A directory contributes its `.yaml`, `.yml` and `.json` files, skipping hidden
//! ones (so a mounted ConfigMap's `..data` copies are not read twice). Watching polls file
//! metadata; a change reloads everything, and a load that fails anywhere is reported with file,
//! document and reason while the last good table keeps serving. This module must not touch the
//! data plane.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use crate::pipeline::Pipeline;
use crate::translate::SERVICE_NAME_LABEL;

/// How often the files are checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The routing objects read from the files.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
}

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
pub fn parse_into(text: &str, path: &Path, objects: &mut Objects) -> Result<(), ManifestError> {
    // Both iterators may repeat an error forever, so stop at the first one.
    let mut docs: Vec<Result<Value, String>> = Vec::new();
    if path.extension().is_some_and(|e| e == "json") {
        for doc in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            let failed = doc.is_err();
            docs.push(doc.map_err(|e| e.to_string()));
            if failed {
                break;
            }
        }
    } else {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let value = Value::deserialize(doc).map_err(|e| e.to_string());
            let failed = value.is_err();
            docs.push(value);
            if failed {
                break;
            }
        }
    }
    for (i, doc) in docs.into_iter().enumerate() {
        let document = i + 1;
        let err = |reason: String| ManifestError::Parse {
            path: path.to_path_buf(),
            document,
            reason,
        };
        let value = doc.map_err(err)?;
        add_value(value, objects).map_err(err)?;
    }
    Ok(())
}

fn add_value(value: Value, objects: &mut Objects) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("not a Kubernetes object: no `kind`")?
        .to_string();
    match kind.as_str() {
        "Service" => objects.services.push(typed("Service", value)?),
        "EndpointSlice" => objects.slices.push(typed("EndpointSlice", value)?),
        "Endpoints" => {
            let ep: Endpoints = typed("Endpoints", value)?;
            objects.slices.extend(slices_from_endpoints(&ep));
        }
        k if k == "List" || k.ends_with("List") => {
            let items = match value.get("items") {
                Some(Value::Array(items)) => items.clone(),
                Some(Value::Null) | None => Vec::new(),
                Some(_) => return Err(format!("{k}: `items` is not a list")),
            };
            for (j, item) in items.into_iter().enumerate() {
                add_value(item, objects).map_err(|e| format!("item {}: {e}", j + 1))?;
            }
        }
        other => tracing::debug!(kind = other, "ignoring object of another kind"),
    }
    Ok(())
}

fn typed<T: serde::de::DeserializeOwned>(what: &str, value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| format!("invalid {what}: {e}"))
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
                pipeline.apply(&objects.services, &objects.slices);
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
}
