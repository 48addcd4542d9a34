//! The TLS frontend's options as the flags give them (`TlsOptions`, `ClientVerify`) and the
//! error that stops TLS from starting (`TlsError`). Plain data: it must not read files, build
//! rustls objects or know how the options are used.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The `Strict-Transport-Security` max-age of the original template (half a year).
pub const DEFAULT_HSTS_MAX_AGE: u64 = 15_768_000;

/// `--ssl-verify`: what happens to a client without a certificate when `--ssl-ca-cert` is set.
/// A certificate that is presented and fails verification fails the handshake either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientVerify {
    /// The handshake fails without a valid client certificate.
    #[default]
    Required,
    /// Clients without a certificate get through; backends see `X-Client-Verify: NONE`.
    Optional,
}

impl ClientVerify {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientVerify::Required => "required",
            ClientVerify::Optional => "optional",
        }
    }
}

impl fmt::Display for ClientVerify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClientVerify {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "required" => Ok(ClientVerify::Required),
            "optional" => Ok(ClientVerify::Optional),
            _ => Err(format!(
                "{:?}: expected required or optional",
                s.chars().take(64).collect::<String>()
            )),
        }
    }
}

/// What the TLS frontend serves; built from flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// `--ssl-cert`: a PEM file (chain and key) or a directory of them. `None`: the TLS port
    /// opened without it (in a cluster, for Secrets): a generated self-signed certificate is
    /// the default (`LoadedCert::self_signed`).
    pub cert: Option<PathBuf>,
    /// `--ssl-default-cert`: the certificate for clients without SNI or with an unknown name
    /// (a path, or a file name inside the `--ssl-cert` directory).
    pub default_cert: Option<PathBuf>,
    /// `--ssl-ca-cert`: verify client certificates against this bundle.
    pub client_ca: Option<PathBuf>,
    pub verify: ClientVerify,
    /// `Strict-Transport-Security` max-age in seconds; `None` sends no header.
    pub hsts_max_age: Option<u64>,
}

/// Why TLS could not start. At runtime the same problems are warnings.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {source}", path.display())]
    Read {
        /// The flag that named the file (`--ssl-cert`, `--ssl-ca-cert`).
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {}: {reason}", path.display())]
    Invalid {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{}: no certificate file in this directory", path.display())]
    EmptyDir { path: PathBuf },
    #[error("--ssl-default-cert {}: no such file (nor in the --ssl-cert directory)", path.display())]
    NoDefault { path: PathBuf },
    #[error("configuring the TLS listener: {0}")]
    Listener(String),
    #[error("generating the self-signed default certificate (no --ssl-cert): {0}")]
    Generate(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_mode_parses() {
        assert_eq!("required".parse(), Ok(ClientVerify::Required));
        assert_eq!("optional".parse(), Ok(ClientVerify::Optional));
        assert!("maybe".parse::<ClientVerify>().is_err());
    }
}
