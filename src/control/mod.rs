//! The control side: sources of objects (the API server's watch, manifest files) feed the
//! pipeline, which runs the pure `translate` and swaps the table in once. Nothing here names
//! the data plane; the only way out is the table writer.

pub mod coalesce;
pub mod gateway_status;
pub mod lease;
pub mod manifests;
pub mod pipeline;
pub mod status;
pub mod translate;
pub mod watch;
