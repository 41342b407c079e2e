//! One station-side copy per unfinished read (issue 37, item 7): two reads that would write
//! the same copy (the same `local_file`, or the same basename under encp's `read_dir`) would
//! clobber each other (encp creates its output with `O_EXCL` and refuses one that exists, so
//! the second would fail for good or take the first's file for its own). So a read whose copy
//! an unfinished read of *another* file writes is refused on arrival, changing nothing. A read
//! of the same file to the same copy is not refused here: it rides on the other
//! (`coalesce.rs`), or is the transfer a rider takes over.
//!
//! Where a read's copy goes is the adapter's ([`mss_adapters::ReadOutput`], from the
//! configuration: `LedgerOptions::read_outputs`); an adapter that writes none (the simulator,
//! Tape REST) makes this a no-op. The writer keeps, in memory, a fingerprint of the copy of
//! every unfinished read that writes one, with the fingerprint of its file: bounded by what is
//! unfinished, filled on arrival and at start-up, emptied when a read settles (`finalize`),
//! journalled like the carriers so a rolled-back transaction neither leaves nor loses one. A
//! hit is confirmed against the holder's row by its id (a fingerprint collision costs nothing
//! but that read), never found by a scan.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ledger::db::{params, Db, DbError, DbResult};

use super::idempotency::fingerprint;
use super::state::{Txn, Undo, WriterState};
use crate::ledger::{NewRequest, OutputInUse};
use mss_adapters::{Direction, ReadOutput};

/// The copies the unfinished reads write, by fingerprint.
#[derive(Debug, Default)]
pub(super) struct Outputs {
    rule: Option<Arc<dyn ReadOutput>>,
    /// Fingerprint of a copy -> the reads writing it: (id, fingerprint of its file).
    by_output: HashMap<u64, Vec<(i64, u64)>>,
    /// Request id -> fingerprint of its copy.
    by_id: HashMap<i64, u64>,
}

/// What one read holds: the fingerprints of its copy and of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    output: u64,
    file: u64,
}

impl Outputs {
    /// Nothing held yet, under `rule`.
    pub fn new(rule: Option<Arc<dyn ReadOutput>>) -> Outputs {
        Outputs {
            rule,
            ..Outputs::default()
        }
    }

    /// The copy a read of `file` writes, as one text per file (runs of `/` in a path are one).
    pub fn output_of(&self, file: &str, local_file: Option<&str>) -> Option<String> {
        let out = self.rule.as_ref()?.read_output(file, local_file)?;
        Some(normalised(&out))
    }

    /// What a read of `file` writing `output` holds.
    fn held(output: &str, file: &str) -> Held {
        Held {
            output: fingerprint(output, ""),
            file: fingerprint(file, ""),
        }
    }

    /// `id` writes the copy of `held`; whether it did not already.
    pub(super) fn hold(&mut self, id: i64, held: Held) -> bool {
        if self.by_id.insert(id, held.output).is_some() {
            return false;
        }
        self.by_output
            .entry(held.output)
            .or_default()
            .push((id, held.file));
        true
    }

    /// `id` writes no copy any more; what it held.
    pub(super) fn free(&mut self, id: i64) -> Option<Held> {
        let output = self.by_id.remove(&id)?;
        let holders = self.by_output.get_mut(&output)?;
        let at = holders.iter().position(|&(h, _)| h == id)?;
        let (_, file) = holders.swap_remove(at);
        if holders.is_empty() {
            self.by_output.remove(&output);
        }
        Some(Held { output, file })
    }

    /// The reads writing `held`'s copy that read another file, oldest first.
    fn others(&self, held: Held) -> Vec<i64> {
        let mut ids: Vec<i64> = (self.by_output.get(&held.output).into_iter().flatten())
            .filter(|&&(_, file)| file != held.file)
            .map(|&(id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Where the adapter writes a read's copy.
    #[cfg(test)]
    pub fn rule(&self) -> Option<Arc<dyn ReadOutput>> {
        self.rule.clone()
    }

    /// Every read holding a copy, with its copy's fingerprint (the audit).
    #[cfg(test)]
    pub fn held_by_id(&self) -> Vec<(i64, u64)> {
        let mut v: Vec<(i64, u64)> = self.by_id.iter().map(|(&i, &o)| (i, o)).collect();
        v.sort_unstable();
        v
    }

    /// The copies of the unfinished reads, from the rows (at start-up), through the partial
    /// indexes of the unfinished states.
    pub fn load(conn: &Db<'_>, rule: Option<Arc<dyn ReadOutput>>) -> DbResult<Self> {
        let mut outputs = Outputs::new(rule);
        if outputs.rule.is_none() {
            return Ok(outputs);
        }
        let select = |states: &str| {
            format!(
                "SELECT id, file, local_file FROM requests WHERE state {states} \
                 AND direction = 'read'"
            )
        };
        let sql = [
            "= 'accepted'",
            "= 'held'",
            "= 'queued'",
            "= 'riding'",
            "IN ('submitted', 'running')",
        ]
        .map(select)
        .join(" UNION ALL ");
        conn.for_each(&sql, params![], |r| {
            let (id, file, local): (i64, String, Option<String>) =
                (r.get(0)?, r.get(1)?, r.get(2)?);
            if let Some(out) = outputs.output_of(&file, local.as_deref()) {
                outputs.hold(id, Outputs::held(&out, &file));
            }
            Ok::<_, DbError>(())
        })?;
        Ok(outputs)
    }
}

/// A copy's text with runs of `/` as one and no trailing `/` (a local path; a URL is kept as
/// it is), so `/data//stage/f` and `/data/stage/f` are one copy.
fn normalised(output: &str) -> String {
    if !output.starts_with('/') {
        return output.to_string();
    }
    let mut out = String::with_capacity(output.len());
    for part in output.split('/').filter(|p| !p.is_empty()) {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

impl WriterState {
    /// The copies of the unfinished reads, as loaded.
    pub fn with_outputs(mut self, outputs: Outputs) -> Self {
        self.outputs = outputs;
        self
    }

    /// `id` writes `held`'s copy (journalled: a rollback frees it).
    fn output_held(&mut self, id: i64, held: Held) {
        if self.outputs.hold(id, held) {
            self.journal(Undo::OutputHeld(id));
        }
    }

    /// `id` settled: it writes no copy any more (journalled: a rollback gives it back).
    pub(super) fn free_output(&mut self, id: i64) {
        if let Some(held) = self.outputs.free(id) {
            self.journal(Undo::OutputFreed(id, held));
        }
    }
}

impl Txn<'_, '_> {
    /// Why new read `item` may not be recorded: another unfinished read, of another file,
    /// writes its copy (confirmed against that read's row).
    pub(super) fn output_in_use(&self, item: &NewRequest) -> DbResult<Option<OutputInUse>> {
        let Some((output, held)) = self.output_of(item) else {
            return Ok(None);
        };
        for id in self.st.outputs.others(held) {
            let row: Option<(String, String, Option<String>)> = self.tx.query_opt(
                "SELECT station, file, local_file FROM requests WHERE id = ?1 \
                 AND direction = 'read' AND file != ?2 \
                 AND state NOT IN ('done', 'failed', 'cancelled')",
                params![id, item.file],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            let Some((station, file, local)) = row else {
                continue;
            };
            if self
                .st
                .outputs
                .output_of(&file, local.as_deref())
                .as_deref()
                == Some(&output)
            {
                return Ok(Some(OutputInUse {
                    field: if item.extras.local_file.is_some() {
                        "local_file"
                    } else {
                        "file"
                    },
                    output,
                    holder: id,
                    holder_station: station,
                    holder_file: file,
                }));
            }
        }
        Ok(None)
    }

    /// New read `item`, recorded as `id`, writes its copy from now on.
    pub(super) fn hold_output(&mut self, item: &NewRequest, id: i64) {
        if let Some((_, held)) = self.output_of(item) {
            self.st.output_held(id, held);
        }
    }

    /// The copy `item` writes, if it is a read that writes one.
    fn output_of(&self, item: &NewRequest) -> Option<(String, Held)> {
        if item.direction != Direction::Read {
            return None;
        }
        let output = (self.st.outputs).output_of(&item.file, item.extras.local_file.as_deref())?;
        let held = Outputs::held(&output, &item.file);
        Some((output, held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Basename;

    impl ReadOutput for Basename {
        fn read_output(&self, file: &str, local_file: Option<&str>) -> Option<String> {
            Some(match local_file {
                Some(f) => f.to_string(),
                None => format!("/stage/{}", file.rsplit('/').next().unwrap_or(file)),
            })
        }
    }

    /// The map holds each read's copy once, finds the readers of other files only, and forgets
    /// a read that settled, leaving no empty entry.
    #[test]
    fn each_read_holds_its_copy_until_freed() {
        let mut o = Outputs::new(Some(Arc::new(Basename)));
        let out = o.output_of("/pnfs/a/f", None).unwrap();
        assert_eq!(out, "/stage/f");
        assert_eq!(
            o.output_of("/pnfs/b/g", Some("/stage//f/")).as_deref(),
            Some("/stage/f"),
            "one copy however the path is spelt"
        );
        let a = Outputs::held(&out, "/pnfs/a/f");
        let b = Outputs::held(&out, "/pnfs/b/f");
        assert!(o.hold(1, a));
        assert!(!o.hold(1, a), "held once");
        assert!(o.hold(2, a));
        assert!(o.others(a).is_empty(), "the same file is no conflict");
        assert_eq!(o.others(b), [1, 2]);
        assert_eq!(o.free(1), Some(a));
        assert_eq!(o.free(1), None);
        assert_eq!(o.others(b), [2]);
        o.free(2);
        assert!(o.by_output.is_empty() && o.by_id.is_empty());
        assert_eq!(Outputs::default().output_of("/pnfs/a/f", Some("/x")), None);
        assert_eq!(normalised("davs://h//x"), "davs://h//x");
    }
}
