//! The `requests` rows the writer changes while a reload is prepared off it (`reload.rs`),
//! noted by the writer itself: every statement that inserts or updates a `requests` row notes
//! its id ([`Txn::note`](super::state::Txn::note)), and a committed transaction hands its ids
//! to the reload. (SQLite's update hook did this before; PostgreSQL has none, and the writer,
//! the only writer, issues every statement anyway.) In debug builds the install compares every
//! row of the snapshot with the row as it is now and panics on a changed row nobody noted
//! ([`unnoted`]), so a statement that forgets to note fails the reload tests.

use std::cell::RefCell;
use std::collections::HashSet;

#[cfg(debug_assertions)]
use crate::ledger::db::{params, ColumnValue, Db, DbError, DbResult, FromColumn, Mismatch};

/// Most rows noted during one preparation before the writer gives up noting (8 bytes and some
/// per row); the install then reads everything on the writer.
pub(super) const MAX_NOTED: usize = 2_000_000;

/// The ids of the `requests` rows one transaction inserted or changed, kept only while a
/// reload is being prepared (else noting is a test of a flag). A `RefCell`, so that the
/// statements in `&self` methods of `Txn` note too.
#[derive(Default)]
pub(super) struct Changed {
    keep: bool,
    ids: RefCell<Vec<i64>>,
}

impl Changed {
    /// Noting (`keep`) or not.
    pub fn new(keep: bool) -> Changed {
        Changed {
            keep,
            ids: RefCell::default(),
        }
    }

    /// Row `id` was inserted or changed (or may have been: noting one too many is harmless).
    pub fn note(&self, id: i64) {
        if self.keep {
            self.ids.borrow_mut().push(id);
        }
    }

    /// The ids noted, once the transaction committed.
    pub fn into_ids(self) -> Vec<i64> {
        self.ids.into_inner()
    }
}

/// The rows changed since a reload's snapshot, from the transactions committed since.
#[derive(Default)]
pub(super) struct Noted {
    ids: HashSet<i64>,
    overflowed: bool,
}

impl Noted {
    /// A committed transaction changed `ids`; past [`MAX_NOTED`] rows noting gives up.
    pub fn add(&mut self, ids: Vec<i64>) {
        if self.overflowed {
            return;
        }
        self.ids.extend(ids);
        if self.ids.len() > MAX_NOTED {
            self.overflowed = true;
            self.ids = HashSet::new();
        }
    }

    /// The rows noted; `None` when there were too many to keep.
    pub fn take(self) -> Option<HashSet<i64>> {
        (!self.overflowed).then_some(self.ids)
    }
}

/// The ids of the `requests` rows that differ between `snapshot` and `now` (a row added, or
/// any column changed) but are not in `noted`: each is a statement that forgot to note. Reads
/// every row twice, so only debug builds call it.
#[cfg(debug_assertions)]
pub(super) fn unnoted(snapshot: &Db<'_>, now: &Db<'_>, noted: &HashSet<i64>) -> DbResult<Vec<i64>> {
    let was = every_row(snapshot)?;
    let is = every_row(now)?;
    let ids: std::collections::BTreeSet<i64> = was.keys().chain(is.keys()).copied().collect();
    Ok(ids
        .into_iter()
        .filter(|id| was.get(id) != is.get(id) && !noted.contains(id))
        .collect())
}

/// One column's value as stored, compared as it is (a real by its bits).
#[cfg(debug_assertions)]
#[derive(PartialEq)]
enum Cell {
    Null,
    Integer(i64),
    Real(u64),
    Text(String),
    Blob(Vec<u8>),
    Wide(i128),
}

#[cfg(debug_assertions)]
impl FromColumn for Cell {
    fn from_column(value: ColumnValue<'_>) -> Result<Cell, Mismatch> {
        Ok(match value {
            ColumnValue::Null => Cell::Null,
            ColumnValue::Integer(i) => Cell::Integer(i),
            ColumnValue::Real(f) => Cell::Real(f.to_bits()),
            ColumnValue::Text(t) => Cell::Text(t.to_owned()),
            ColumnValue::Blob(b) => Cell::Blob(b.to_vec()),
            ColumnValue::Wide(w) => Cell::Wide(w),
        })
    }
}

/// Every `requests` row, all its columns, by id.
#[cfg(debug_assertions)]
fn every_row(db: &Db<'_>) -> DbResult<std::collections::HashMap<i64, Vec<Cell>>> {
    let mut out = std::collections::HashMap::new();
    db.for_each("SELECT * FROM requests", params![], |r| {
        let values = (0..r.column_count())
            .map(|i| r.get::<Cell>(i))
            .collect::<DbResult<Vec<_>>>()?;
        out.insert(r.get(r.index_of("id")?)?, values);
        Ok::<_, DbError>(())
    })?;
    Ok(out)
}
