//! The two small types every part of the table names: an entry's index (`EntryId`) and the
//! runtime state carried across table generations (`Shared`, which equality ignores, so a
//! table built again equals the one it replaces). A leaf: it names nothing of the table.

use std::fmt;
use std::sync::Arc;

/// Index of an entry in `RoutingTable::entries`.
pub type EntryId = u32;

/// Runtime state shared across table generations. Equality ignores it on purpose.
pub struct Shared<T>(pub Arc<T>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(Arc::clone(&self.0))
    }
}
impl<T: Default> Default for Shared<T> {
    fn default() -> Self {
        Shared(Arc::default())
    }
}
impl<T> PartialEq for Shared<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Shared<T> {}
impl<T> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Shared(..)")
    }
}
impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
