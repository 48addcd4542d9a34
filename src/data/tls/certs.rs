//! One certificate chain with its key (`LoadedCert`): parsing an HAProxy-style PEM bundle,
//! checking the key against the leaf, and reading the names, subject and expiry it carries.
//! Also the crypto provider every certificate and verifier here is built with. It must not
//! read files, keep state or decide what is served: it only turns bytes into a checked value.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use x509_parser::objects::{oid_registry, oid2abbrev};
use x509_parser::prelude::{GeneralName, X509Certificate, parse_x509_certificate};

/// Longest client subject passed upstream; a longer one is cut, so a client cannot make every
/// forwarded request grow without bound.
const MAX_DN_LEN: usize = 1024;

/// The one crypto provider every certificate and verifier here is built with, named explicitly
/// so that no process-wide default (or a second provider linked in by a dependency) decides.
pub(super) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

pub(super) fn system_time(unix_seconds: i64) -> SystemTime {
    if unix_seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix_seconds.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(unix_seconds.unsigned_abs())
    }
}

/// A certificate chain with its key, checked and ready for handshakes.
#[derive(Clone)]
pub struct LoadedCert {
    pub(super) key: Arc<CertifiedKey>,
    /// DNS names it serves (subjectAltName, else the CN), lowercased; `*.` for wildcards.
    pub names: Vec<String>,
    pub subject: String,
    pub not_after: SystemTime,
    /// `not_after` as the certificate writes it, for messages.
    pub(super) not_after_text: String,
    /// Served for any name at its address, after the names above: the certificate of a
    /// Gateway listener without a hostname (which takes every host there).
    pub(super) any_name: bool,
}

impl fmt::Debug for LoadedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedCert")
            .field("names", &self.names)
            .field("subject", &self.subject)
            .field("not_after", &self.not_after_text)
            .finish_non_exhaustive()
    }
}

impl LoadedCert {
    /// Parses an HAProxy-style PEM bundle: the certificate chain (leaf first) and its private
    /// key in one file. Checks that it parses and that the key matches the leaf; expiry is the
    /// caller's decision (`is_expired`).
    pub fn from_pem(pem: &[u8]) -> Result<LoadedCert, String> {
        let chain = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("bad PEM: {e}"))?;
        if chain.is_empty() {
            return Err("no CERTIFICATE block".into());
        }
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no private key".to_string(),
            e => format!("bad private key: {e}"),
        })?;
        let (names, subject, not_after, not_after_text) = {
            let (_, leaf) =
                parse_x509_certificate(&chain[0]).map_err(|e| format!("bad certificate: {e}"))?;
            let validity = leaf.validity();
            (
                dns_names(&leaf),
                one_line_dn(&leaf),
                system_time(validity.not_after.timestamp()),
                validity.not_after.to_string(),
            )
        };
        let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                "the private key does not match the certificate".to_string()
            }
            e => format!("unusable private key: {e}"),
        })?;
        Ok(LoadedCert {
            key: Arc::new(key),
            names,
            subject,
            not_after,
            not_after_text,
            any_name: false,
        })
    }

    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.not_after <= now
    }
}

/// The names a certificate serves: its DNS subjectAltNames, or its CN when it has none (as
/// browsers no longer do, but older HAProxy setups rely on).
fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some(normalize_name(d)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(normalize_name),
        );
    }
    names.retain(|n| !n.is_empty());
    names.sort();
    names.dedup();
    names
}

pub(super) fn normalize_name(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The subject in OpenSSL's one-line form (`/C=DE/O=Acme/CN=client`), which is what HAProxy's
/// `ssl_c_s_dn` gives, so backends written for the original keep parsing it. Control
/// characters become `?` (they cannot travel in a header).
pub(super) fn one_line_dn(cert: &X509Certificate<'_>) -> String {
    let mut out = String::new();
    for rdn in cert.subject().iter_rdn() {
        for attr in rdn.iter() {
            let oid = attr.attr_type();
            let key = oid2abbrev(oid, oid_registry())
                .map(str::to_string)
                .unwrap_or_else(|_| oid.to_id_string());
            out.push('/');
            out.push_str(&key);
            out.push('=');
            out.push_str(attr.as_str().unwrap_or("?"));
        }
    }
    out.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(MAX_DN_LEN)
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::data::tls) fn bundle(names: &[&str]) -> (String, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.self_signed(&key).unwrap();
        (format!("{}{}", cert.pem(), key.serialize_pem()), key)
    }

    pub(in crate::data::tls) fn load(names: &[&str]) -> LoadedCert {
        LoadedCert::from_pem(bundle(names).0.as_bytes()).unwrap()
    }

    #[test]
    fn bundles_are_checked() {
        let (good, _) = bundle(&["ok.test"]);
        let c = LoadedCert::from_pem(good.as_bytes()).unwrap();
        assert_eq!(c.names, vec!["ok.test".to_string()]);
        assert!(!c.is_expired(SystemTime::now()));
        assert!(c.expires_after_now_plus_a_day());

        let cert_only = good.split("-----BEGIN PRIVATE KEY").next().unwrap();
        assert!(
            LoadedCert::from_pem(cert_only.as_bytes())
                .unwrap_err()
                .contains("no private key")
        );
        let (_, other_key) = bundle(&["x.test"]);
        let mismatched = format!("{cert_only}{}", other_key.serialize_pem());
        let e = LoadedCert::from_pem(mismatched.as_bytes()).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        assert!(LoadedCert::from_pem(b"garbage").is_err());
    }

    impl LoadedCert {
        fn expires_after_now_plus_a_day(&self) -> bool {
            self.not_after > SystemTime::now() + Duration::from_secs(86_400)
        }
    }
}
