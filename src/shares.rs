//! Share accounting, pure: how usage forgets ([`model`]), every group's usage in memory
//! ([`book`]), the Fair Tree ranking ([`fairtree`]), floors and caps ([`limits`]), and the
//! operator's view of all of it ([`view`]), which `mssbroker shares` and `GET /v1/groups` print.
//!
//! Share accounting, pure (no I/O, time passed in). `model.rs` (`UsageModel`: the window weights,
//! the half-life accumulator `HalfLifeAcc` against a reference time `t0`), `book.rs` (`UsageBook`:
//! every group's cumulative, half-life and per-window usage in memory; `UsageLookup`, the one
//! interface decisions read usage through, implemented by the book at an instant and by a frozen
//! `Effective`), `fairtree.rs` (`LF` as exact big rationals, ranking with tie rules; a `"parent"`
//! leaf's `LF` infinite), `limits.rs` (floors, caps, feasibility caps; `held_by` counts the request
//! being decided), `sam.rs` (SAM's `decide` over any `UsageLookup`, floors and caps first,
//! `standing_value` (a `"parent"` leaf's usage is its parent's), and `less_than`, the exact
//! comparison), `view.rs` (the `SharesView` rows that `mssbroker shares` and `GET /v1/groups`
//! print; the table), `input.rs` (`--usage FILE`), `tests.rs` (zero-share siblings and `"parent"`
//! leaves worked by hand through SAM, Fair Tree and the view).

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
