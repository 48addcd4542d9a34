//! switchyard: a Kubernetes service load balancer.
//!
//! Crate map (data flows one way, top to bottom):
//! - `config`: command-line flags -> validated `Config`.
//! - `manifests`: the offline source (Kubernetes YAML/JSON files), watched; feeds `pipeline`.
//! - `pipeline`: translate, skip if equal, swap once, log warnings; shared by every source.
//! - `translate`: PURE (Services, EndpointSlices, options, previous table) -> (table, warnings).
//! - `table`: the immutable `RoutingTable` and its one `ArcSwap` (writer / reader halves).
//! - `matcher`, `balance`, `sticky`: pure host/path matching, endpoint selection, stickiness.
//! - `http_proxy`: the Pingora data plane; lookups only.
//! - `admin`: `/healthz` and `/readyz`.
//! - `error_page`: the body for unmatched requests, loaded once at startup.
//! - `demo`: two tiny backends for the bundled example.

pub mod balance;
pub mod matcher;
pub mod sticky;
pub mod table;
pub mod translate;
