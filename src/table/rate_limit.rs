//! ingress-nginx's request limits per client address (`limit-rps`, `limit-rpm`,
//! `limit-burst-multiplier`, `limit-connections`, `limit-allowlist`) as the table holds them:
//! the limits an Ingress's routes apply, and the state they count in (each client's excess
//! and requests in flight), which survives table swaps by the Ingress's name (translate hands
//! the previous state to an unchanged limit). Data only: `decide::rate_limit` admits or
//! refuses a request. No Kubernetes, Pingora or tokio.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde::Serialize;

use crate::table::cidr::Cidr;
use crate::table::shared::Shared;

/// The most client addresses one limit counts at a time (nginx's 5 MiB zone holds about as
/// many); past it, addresses whose count has run out are forgotten, and a new one is refused
/// while none has (as nginx answers when its zone is full).
pub const MAX_CLIENTS: usize = 65_536;

/// One Ingress's limits, per client address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    /// Requests per second (`limit-rps`), `burst_multiplier` times as many at once; with
    /// `--limit-scope cluster`, this replica's share (here and below).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rps: Option<u32>,
    /// Requests per minute (`limit-rpm`), likewise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// `limit-burst-multiplier` (5).
    pub burst_multiplier: u32,
    /// Requests in progress at once (`limit-connections`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// Client networks no limit applies to (`limit-allowlist`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Cidr>,
    /// The replicas the Ingress's limits are shared by (`--limit-scope cluster`; 1: each
    /// replica enforces them whole).
    pub replicas: u32,
    /// What the limits have counted (not part of equality).
    #[serde(skip)]
    pub state: Shared<LimitState>,
}

/// The counts of one [`RateLimit`].
#[derive(Debug, Default)]
pub struct LimitState {
    /// The instant counts are measured from (the first request's).
    pub epoch: OnceLock<Instant>,
    /// Per address: the `limit-rps` and `limit-rpm` buckets, in one lock so that a request
    /// one of them refuses is counted by neither (as nginx does).
    pub buckets: Mutex<HashMap<IpAddr, Buckets>>,
    /// Per address: requests in progress.
    pub in_flight: Mutex<HashMap<IpAddr, u32>>,
}

/// nginx's `limit_req` state for one address: the excess over the rate, in thousandths of a
/// request, as of `last` (milliseconds since the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    pub excess: u64,
    pub last: u64,
}

/// The per-second and per-minute buckets of one address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Buckets {
    pub second: Bucket,
    pub minute: Bucket,
}
