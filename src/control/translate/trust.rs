//! The CA bundles Services name by reference (`lb.backend-ca-secret`,
//! `lb.backend-ca-configmap`), resolved against the Secrets and ConfigMaps translate is given:
//! the `ca.crt` key of the object of that name in the Service's own namespace, checked to hold
//! at least one PEM certificate. Only `kubernetes.io/tls` Secrets count, since those are the
//! only ones the cluster source watches: offline manifests resolve as a cluster would. Pure:
//! it reads the objects it is handed and nothing else; the data plane parses the certificates
//! (and refuses one that does not parse).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::annotations::show;
use super::inputs::meta_key;
use super::view::*;
use crate::table::upstream::CA_KEY;

/// The Secrets and ConfigMaps of one build, indexed on first use (most builds name none).
#[derive(Default)]
pub(super) struct Trust<'a> {
    secrets: &'a [&'a Secret],
    config_maps: &'a [&'a ConfigMap],
    index: Option<Index<'a>>,
}

type ByKey<'a, T> = HashMap<(&'a str, &'a str), &'a T>;

struct Index<'a> {
    secrets: ByKey<'a, Secret>,
    config_maps: ByKey<'a, ConfigMap>,
}

impl<'a> Trust<'a> {
    pub(super) fn new(secrets: &'a [&'a Secret], config_maps: &'a [&'a ConfigMap]) -> Self {
        Trust {
            secrets,
            config_maps,
            index: None,
        }
    }

    /// The PEM text of the `ca.crt` of the `kind` (`Secret` or `ConfigMap`) `namespace/name`,
    /// or why it cannot be used (completing "Secret ns/name ...").
    pub(super) fn ca_pem(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<[u8]>, String> {
        let (secrets, config_maps) = (self.secrets, self.config_maps);
        let index = self.index.get_or_insert_with(|| Index {
            secrets: secrets
                .iter()
                .map(|s| (meta_key(&s.metadata.namespace, &s.metadata.name), *s))
                .collect(),
            config_maps: config_maps
                .iter()
                .map(|c| (meta_key(&c.metadata.namespace, &c.metadata.name), *c))
                .collect(),
        });
        let bytes: &[u8] = if kind == "Secret" {
            let secret = index
                .secrets
                .get(&(namespace, name))
                .ok_or("is not found (only kubernetes.io/tls Secrets are watched)")?;
            if secret.type_.as_deref() != Some("kubernetes.io/tls") {
                return Err(format!(
                    "is of type {}, not kubernetes.io/tls (the only Secrets watched)",
                    show(secret.type_.as_deref().unwrap_or("Opaque"))
                ));
            }
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(CA_KEY))
                .map(|b| b.0.as_slice())
                .ok_or(format!("has no {CA_KEY}"))?
        } else {
            let cm = index
                .config_maps
                .get(&(namespace, name))
                .ok_or(format!("is not found (or holds no {CA_KEY})"))?;
            cm.data
                .as_ref()
                .and_then(|d| d.get(CA_KEY))
                .map(|s| s.as_bytes())
                .or_else(|| {
                    cm.binary_data
                        .as_ref()
                        .and_then(|d| d.get(CA_KEY))
                        .map(|b| b.0.as_slice())
                })
                .ok_or(format!("has no {CA_KEY}"))?
        };
        check_ca_pem(bytes)?;
        Ok(bytes.into())
    }
}

/// At least one PEM certificate and no broken PEM block. The certificates themselves are
/// parsed by the data plane, which refuses one that does not parse.
fn check_ca_pem(pem: &[u8]) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("has a bad {CA_KEY} ({e})"))?;
    if certs.is_empty() {
        return Err(format!("has no CERTIFICATE in {CA_KEY}"));
    }
    Ok(())
}
