//! Share accounting, pure: how usage forgets ([`model`]), every group's usage in memory
//! ([`book`]), the Fair Tree ranking ([`fairtree`]), floors and caps ([`limits`]), and the
//! operator's view of all of it ([`view`]), which `mssbroker shares` and `GET /v1/groups` print.

pub mod book;
pub mod fairtree;
pub mod input;
pub mod limits;
pub mod model;
pub mod sam;
pub mod view;

pub use book::{Effective, UsageBook, UsageLookup};
pub use model::UsageModel;

#[cfg(test)]
mod tests;
