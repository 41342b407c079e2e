//! The Enstore adapter: one `encp` process per transfer.
//!
//! `encp` blocks until its transfer ends, so the adapter runs at most `max_processes` of them at
//! once and tells the dispatcher how much room is left. Each runs with the broker's priority as
//! `--priority N` and `--delpri 0 --age-time 0`, the configured Enstore options
//! (`--storage-group`, `--file-family`, `--library` for writes, `--delayed-dismount`), then the
//! files: `SRC DEST` for reads and writes, `--get-bfid BFID DEST` for a read whose bfid the
//! station gave. The library manager ignores the ticket's `--delpri`/`--age-time`: it ages
//! each of its queues by `DELTA_PRI` = 1 every `AGE_TIME` = 30 minutes (Enstore-org/enstore
//! `src/manage_queue.py`, `SortedList`), so the MSS does age, slowly.
//!
//! Which options a run may have depends on the encp build (`build`: see [`build`]); a
//! configuration passing one the build refuses is refused at load, naming it. Configured
//! options are read as encp's own parser reads them ([`options`]: `_` for `-`, unique
//! prefixes), checked at their full names and passed at them; what encp would refuse is
//! refused at load.
//!
//! What happened is read from the process:
//! - a line of its standard output containing `started_pattern` (encp prints "Mover called
//!   back" once a mover has connected, at `--verbose` 4 and above: `TRANSFER_LEVEL` in
//!   `src/encp.py`) means the transfer started;
//! - exit 0 is done, with the bytes of the file on the local side (the declared size if it
//!   cannot be read);
//! - anything else failed. encp exits 1 for every ordinary failure, so whether it is retried
//!   comes from the `STATUS=<name>` line it writes on standard error (see [`status`]): a name
//!   in `fatal_statuses` fails the request, any other is retried. Without a STATUS line, an
//!   option the build refused is fatal, an exit code in `fatal_exit_codes` too, anything else
//!   is retried;
//! - a transfer past `timeout_secs` is stopped (SIGTERM, then SIGKILL after
//!   `kill_grace_secs`) and fails retryably; a cancelled one is stopped the same way;
//! - a run that printed "File ... copied successfully." (`finish_request` in `src/encp.py`, at
//!   `--verbose` 4) is done however it ended afterwards: encp exits 128+signal on a signal it
//!   catches (`src/delete_at_exit.py`), also in its last moments, with the file kept;
//! - encp creates a read's output empty before it queues and refuses an existing one
//!   (`prepare_read_from_hsm`, `outputfile_check`: USERERROR, final), and removes it on failure
//!   and on the signals it catches; a read killed by SIGKILL cannot, so the adapter removes the
//!   output that run created (never one that was there before), or the retry would fail for
//!   good;
//! - a read whose output is already there is not run (see `existing.rs`): at attempt 1 it is
//!   refused as encp would refuse it; at a later attempt a regular file of exactly the declared
//!   size is the earlier attempt's copy (encp said "copied" and the broker died before it
//!   recorded the end), done; anything else is refused and left in place;
//! - a write's namespace entry (`/pnfs/...`) is created empty the same way
//!   (`create_zero_length_pnfs_files`) and gets its bfid (layer 1) and size only after the
//!   transfer, so a write SIGKILLed before then leaves an empty entry encp's retry would refuse
//!   for good: one there at attempt 1 is refused without running encp, and at a later attempt
//!   an empty entry with layers 1 and 4 empty (the earlier run's) is removed before encp runs;
//!   one with data or a layer set is refused and left in place (see `existing.rs`).
//!
//! Stopping encp does not take its ticket out of the library manager's queue (its SIGTERM
//! handler only exits: `src/delete_at_exit.py`). With `cancel_command` (an admin command, e.g.
//! `enstore library --delete-work {unique_id} {library}`: `src/library_manager_client.py`),
//! a cancelled run still queued is also deleted there; its unique id is read from the ticket
//! encp prints at `--verbose` 11 (`TICKET_1_LEVEL`, "LM SUBMISSION TICKET").
//!
//! Enstore grants *admin* priority (its library manager serves the admin queue before any
//! regular request) in two ways, both available per priority class in `classes`: a library
//! manager `adminpri` rule matching fields of the request ticket (a site setting in Enstore's
//! configuration; the broker can only send matching fields, through `args` such as
//! `--storage-group`), or `ENCP_DAQ` set in encp's environment together with a regular priority
//! of 1000001 or more, which the library manager caps at 1000001 and turns the excess into
//! admin priority `priority / 1000001 - 1`. The latter works only where the library manager
//! has an entry in Enstore's `priority` configuration (without one `PriSelector.priority`
//! returns the ticket's priorities untouched: `src/priority_selector.py`), and any non-empty
//! `ENCP_DAQ` enables it (encp sends its value, the selector tests it for truth; "0" enables
//! it too). So `ENCP_DAQ` is set only per priority class, never for every run.
//!
//! Every child gets SIGTERM when the broker dies (Linux `PR_SET_PDEATHSIG`): a transfer the
//! broker no longer watches is stopped, and the broker submits it again as a new attempt after
//! its restart, so it is never run twice at once.
//!
//! Enstore, one `encp` process per run (`encp.rs`: the module's notes with their Enstore sources,
//! and the re-exports). `config.rs`: `[mss.encp]` raw and validated (issues in key order),
//! `capabilities`; `local.rs`: `check_local_file_for` (symlinks resolved, then under a
//! `local_roots` entry with `{station}` expanded, not a directory); `existing.rs`: a read whose
//! output is there before encp runs (refused at attempt 1, done at a later one when it is a regular
//! file of exactly the declared size: the earlier attempt's copy); `invocation.rs`: the pure
//! command line (`operand` refuses a leading `-`: encp's parser does not honour `--`);
//! `outcome.rs`: the pure `outcome` (what the run `RunOutput`: its `STATUS=` name, an option its build
//! refused, to an event; `done_unless_directory`); `adapter.rs`: the adapter (a semaphore of
//! `max_processes`, runs and finished runs in memory); `watch.rs`: one watcher task per run (start,
//! the LM ticket's unique id and "copied successfully" from stdout, the STATUS line from stderr,
//! timeout, cancellation by SIGTERM then SIGKILL to the process group, the output a SIGKILLed read
//! left removed, children with `PR_SET_PDEATHSIG`); `commands.rs`: `cancel_command` for a ticket
//! still queued and the runner of the site's commands; `build.rs`: the encp builds (user, user2,
//! admin: Enstore's `encp_user.py`, `encp_user2.py`, `encp.py`) and the level of each option of
//! encp's table; `status.rs`: the `STATUS=` line and the default `fatal_statuses` (from
//! `e_errors.py`); `options.rs`: encp's options parsed as Enstore's `option.py` parses them
//! (`config/args.rs` reads `[mss.encp] args` with it), refused at start; `tests.rs`: the unit
//! tests.

mod adapter;
pub mod build;
mod commands;
mod config;
mod existing;
mod invocation;
mod local;
pub mod options;
mod outcome;
pub mod status;
mod watch;

pub use adapter::EncpAdapter;
pub use build::Build;
pub use config::{
    ClassSettings, EncpConfig, RawClass, RawEncpConfig, MAX_REGULAR_PRIORITY,
    MOVER_CALLBACK_VERBOSE, TICKET_VERBOSE,
};
pub use invocation::{invocation, Invocation};
pub use local::STATION;
pub use outcome::{done_unless_directory, outcome, Exit, RunOutput};
pub use status::DEFAULT_FATAL_STATUSES;

#[cfg(test)]
mod tests;
