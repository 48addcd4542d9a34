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
pub(super) const MAX_DN_LEN: usize = 1024;

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

/// The one name of the generated default certificate: under `.invalid`, which no real host
/// has (RFC 2606), so it never claims a name a Secret should serve.
pub const SELF_SIGNED_NAME: &str = "switchyard.invalid";
/// Its subject's common name, as clients show it.
pub const SELF_SIGNED_SUBJECT: &str = "switchyard default certificate (self-signed)";

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

    /// A self-signed certificate for `SELF_SIGNED_NAME`, valid for ten years from an hour ago,
    /// with a new ECDSA P-256 key: what a TLS port without `--ssl-cert` serves to names no
    /// Secret covers (ingress-nginx serves its "Fake Certificate" the same way). Clients are
    /// meant to distrust it: it says TLS works and the certificate is missing.
    pub fn self_signed() -> Result<LoadedCert, String> {
        let key = rcgen::KeyPair::generate().map_err(|e| format!("key generation: {e}"))?;
        let mut params = rcgen::CertificateParams::new(vec![SELF_SIGNED_NAME.to_string()])
            .map_err(|e| format!("certificate parameters: {e}"))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, SELF_SIGNED_SUBJECT);
        let now = std::time::SystemTime::now();
        params.not_before = (now - std::time::Duration::from_secs(3600)).into();
        params.not_after = (now + std::time::Duration::from_secs(10 * 365 * 86_400)).into();
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("self-signing: {e}"))?;
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        LoadedCert::from_pem(pem.as_bytes())
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

    #[test]
    fn the_generated_certificate_is_self_signed_for_an_invalid_name() {
        let c = LoadedCert::self_signed().unwrap();
        assert_eq!(c.names, vec![SELF_SIGNED_NAME.to_string()]);
        assert!(c.subject.contains(SELF_SIGNED_SUBJECT), "{}", c.subject);
        assert!(c.not_after > SystemTime::now() + Duration::from_secs(9 * 365 * 86_400));
        // A new key each time.
        let d = LoadedCert::self_signed().unwrap();
        assert_ne!(c.key.cert[0], d.key.cert[0]);
    }

    impl LoadedCert {
        fn expires_after_now_plus_a_day(&self) -> bool {
            self.not_after > SystemTime::now() + Duration::from_secs(86_400)
        }
    }
}
