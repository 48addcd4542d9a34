//! The control side: sources of objects (the API server's watch, manifest files) feed the
//! pipeline, which runs the pure `translate` and swaps the table in once. Nothing here names
//! the data plane; the only way out is the table writer.

pub mod coalesce;
pub mod events;
pub mod gateway_status;
pub mod lease;
pub mod manifests;
pub mod objects;
pub mod pipeline;
pub mod retry;
pub mod status;
pub mod status_writer;
pub mod translate;
pub mod watch;

/// The field manager of every write to the API server (`managedFields` names it), so that an
/// operator sees which fields are switchyard's.
pub const FIELD_MANAGER: &str = "switchyard";

/// Parameters of a create or replace, with switchyard's field manager.
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Parameters of a patch, with switchyard's field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}
