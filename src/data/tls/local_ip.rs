//! The local address of the connection whose TLS handshake runs in the current task: set by
//! the handshake (`scope`), read by the certificate resolver (`get`), which rustls does not
//! give it. Apart from both so that neither imports the other. It must hold nothing else.

use std::future::Future;
use std::net::IpAddr;

tokio::task_local! {
    /// The local address of the connection whose handshake runs in this task. rustls calls
    /// the certificate resolver from within the handshake's poll, on this task (Pingora's
    /// handshake offload, which would move it to another runtime, is not turned on), so the
    /// resolver reads it without a lock or an allocation.
    static LOCAL_IP: Option<IpAddr>;
}

/// The local address of the connection being handshaken in this task, when the acceptor was
/// told to look (`by_local_address`).
pub(super) fn get() -> Option<IpAddr> {
    LOCAL_IP.try_with(|ip| *ip).ok().flatten()
}

/// Runs `f` (a handshake) with `local` as its connection's local address.
pub(super) fn scope<F: Future>(local: Option<IpAddr>, f: F) -> impl Future<Output = F::Output> {
    LOCAL_IP.scope(local, f)
}
