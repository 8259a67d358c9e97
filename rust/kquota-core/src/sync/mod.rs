//! Lock-free machinery that knows nothing of Kafka: copy-on-write cells reclaimed by an
//! epoch, the concurrent hash map, the swap of a map's table for a right-sized one, and
//! cache prefetch hints.

pub mod cow;
#[cfg(not(loom))]
pub mod hash_map;
mod prefetch;
pub mod table_swap;

pub(crate) use prefetch::prefetch;
#[cfg(not(loom))]
pub(crate) use prefetch::prefetch_all;
