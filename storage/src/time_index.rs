//! The time index shares its file header with the offset index: see [`crate::offset_index`].

pub use crate::offset_index::TimeIndex;
