//! The handshake on the TLS port (`HandshakeAcceptor`): run with a deadline on each accepted
//! connection, with the port's configuration or the one of the Gateway listener the caller
//! names (`listener_auth`), and a failure classified by reason (`handshake_failure`) and
//! counted. It must not choose certificates or verify clients (the rustls config does that), and
//! it never parses a request. With `--gateway-addresses` it tells the certificate choice the
//! connection's local address (`local_ip::scope`), which rustls's resolver is not given.

use std::sync::Arc;
use std::time::Duration;

use pingora::listeners::tls::Acceptor;
use pingora::protocols::IO;
use pingora::protocols::tls::TlsStream;

use super::listener_auth::ListenerAuth;
use super::local_ip;
use crate::ops::metrics::{Metrics, TlsFailure};
use crate::table::client_validation::ClientValidation;

/// Runs server handshakes with a deadline and counts the failures by reason.
pub struct HandshakeAcceptor {
    pub(super) acceptor: Acceptor,
    /// The configurations of Gateway listeners that verify clients.
    pub(super) listeners: ListenerAuth,
    pub(super) timeout: Duration,
    pub(super) metrics: Option<Arc<Metrics>>,
    /// Certificates may depend on the local address (`--gateway-addresses`).
    pub(super) by_local_address: bool,
}

impl HandshakeAcceptor {
    /// Lets the certificate choice see each connection's local address, where Gateways with
    /// an address of their own have certificates of their own.
    pub fn with_local_addresses(mut self, on: bool) -> Self {
        self.by_local_address = on;
        self
    }

    /// The TLS stream, or `None` when the handshake failed or timed out (the connection is
    /// then dropped; rustls has already sent its alert where there was one to send).
    /// `listener`: the hello's server name belongs to a Gateway listener or an Ingress host
    /// that verifies client certificates so.
    pub async fn accept<S: IO + 'static>(
        &self,
        stream: S,
        listener: Option<&ClientValidation>,
    ) -> Option<TlsStream<S>> {
        let own;
        let acceptor = match listener {
            None => &self.acceptor,
            Some(v) => match self.listeners.acceptor(v) {
                Some(a) => {
                    own = a;
                    &*own
                }
                None => {
                    if let Some(m) = &self.metrics {
                        m.data.tls_handshake_failed(
                            super::client_auth::FRONTEND_LABEL,
                            TlsFailure::BadClientCertificate,
                        );
                    }
                    return None;
                }
            },
        };
        let local = if self.by_local_address {
            stream
                .get_socket_digest()
                .and_then(|d| d.local_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
        } else {
            None
        };
        let handshake = local_ip::scope(local, acceptor.tls_handshake(stream));
        let failure = match tokio::time::timeout(self.timeout, handshake).await {
            Ok(Ok(tls)) => return Some(tls),
            Ok(Err(e)) => {
                let reason = handshake_failure(&e.to_string());
                tracing::debug!(error = %e, reason = reason.as_str(), "TLS handshake failed");
                reason
            }
            Err(_) => TlsFailure::Timeout,
        };
        if let Some(m) = &self.metrics {
            m.data
                .tls_handshake_failed(super::client_auth::FRONTEND_LABEL, failure);
        }
        None
    }
}

/// Classifies a failed handshake by its message. Pingora keeps only the text of the rustls
/// (or I/O) error, so the text is what there is; `handshake_failures_are_classified` pins the
/// rustls messages this relies on.
pub fn handshake_failure(message: &str) -> TlsFailure {
    const NO_CERT: &[&str] = &["no server certificate chain resolved"];
    const CLIENT_CERT: &[&str] = &[
        "invalid peer certificate",
        "peer sent no certificates",
        "CertificateRequired",
    ];
    const PROTOCOL: &[&str] = &[
        "received corrupt message",
        "received unexpected",
        "peer is incompatible",
        "peer misbehaved",
        "received fatal alert",
        "cannot decrypt",
        "excess record size",
        "doesn't support any known protocol",
        "presented server name type",
    ];
    const IO: &[&str] = &[
        "handshake eof",
        "end of file",
        "os error",
        "reset by peer",
        "connection reset",
        "broken pipe",
    ];
    let has = |list: &[&str]| list.iter().any(|m| message.contains(m));
    if has(NO_CERT) {
        TlsFailure::NoCertificate
    } else if has(CLIENT_CERT) {
        TlsFailure::BadClientCertificate
    } else if has(PROTOCOL) {
        TlsFailure::Protocol
    } else if has(IO) {
        TlsFailure::Io
    } else {
        TlsFailure::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_failures_are_classified() {
        use rustls::{CertificateError, Error, InvalidMessage, PeerIncompatible};
        use std::io::{Error as IoError, ErrorKind};
        // As Pingora words them: its context, then tokio-rustls' io::Error around the rustls
        // error (or a plain I/O error).
        let pingora = |e: IoError| format!("TLSHandshakeFailure context: tls connect error: {e}");
        let tls = |e: Error| pingora(IoError::new(ErrorKind::InvalidData, e));
        let cases = [
            (
                tls(Error::General(
                    "no server certificate chain resolved".into(),
                )),
                TlsFailure::NoCertificate,
            ),
            (
                tls(Error::NoCertificatesPresented),
                TlsFailure::BadClientCertificate,
            ),
            (
                tls(Error::InvalidCertificate(CertificateError::Expired)),
                TlsFailure::BadClientCertificate,
            ),
            (
                tls(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
                TlsFailure::BadClientCertificate,
            ),
            (
                tls(Error::InvalidMessage(InvalidMessage::InvalidContentType)),
                TlsFailure::Protocol,
            ),
            (
                tls(Error::PeerIncompatible(PeerIncompatible::Tls12NotOffered)),
                TlsFailure::Protocol,
            ),
            (
                tls(Error::AlertReceived(rustls::AlertDescription::UnknownCA)),
                TlsFailure::Protocol,
            ),
            (
                pingora(IoError::new(ErrorKind::UnexpectedEof, "tls handshake eof")),
                TlsFailure::Io,
            ),
            (
                pingora(IoError::from(ErrorKind::ConnectionReset)),
                TlsFailure::Io,
            ),
            (pingora(IoError::from_raw_os_error(104)), TlsFailure::Io),
            ("something new".to_string(), TlsFailure::Other),
        ];
        for (message, want) in cases {
            assert_eq!(handshake_failure(&message), want, "{message}");
        }
    }
}
