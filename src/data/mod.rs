//! The data plane, by layer: `wire` (codecs), `upstream` (pools of backend connections),
//! `tls`, then what every engine shares — the frontend's context (`frontend`), recording
//! (`record`), mirror copies (`mirror`), the HTTP/1 header's intake and refusals — then the
//! engines (`engine`), and `listener`, which only guards a client connection and hands it to
//! one. Each applies the decisions of `decide` to its own wire representation and holds no
//! request policy of its own; nothing here names a Kubernetes type. A module names only
//! modules of its own layer or below it (the architecture test forbids any import cycle).

pub mod engine;
pub mod exchange;
pub mod external_auth;
pub mod frontend;
pub mod guard;
pub mod headers;
pub mod intake;
pub mod listener;
pub mod mirror;
pub mod passthrough;
pub mod record;
pub mod refusals;
pub mod tls;
pub mod upstream;
pub mod wire;

mod timeouts;

pub use timeouts::Timeouts;
