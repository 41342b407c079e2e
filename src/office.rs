//! A term of office (issue 42, step 5): the parts of the broker that live while it leads and no
//! longer. The HTTP server, its listener, TLS, authentication, limits, metrics and `/healthz`
//! live for the process; an [`Office`] (the ledger handle, the MSS adapter as the term holds it,
//! the dispatcher's cancel channel, readiness) lives for one leadership term, published in the
//! process's [`OfficeSlot`] while the term lasts. `startup::term` opens and ends terms as a
//! `leadership::Role` watch says.
//!
//! A handler takes the office from the slot ([`OfficeSlot::current`]); with none it answers 503
//! "standby" ([`Standby`]). Ending a term ([`OfficeSlot::withdraw`]) first empties the slot and
//! then clears the term's [`InOffice`] flag: from that instant a write that took the office
//! before is not acknowledged either (the handler asks [`Office::holds`] after the ledger's
//! answer), and the term's adapter ([`mss_gate::Gated`]) starts no further MSS call.
//! `office/mss_gate.rs`: that adapter.

pub mod mss_gate;

use std::sync::{Arc, Mutex, RwLock};

use mss_adapters::MssAdapter;
use tokio::sync::mpsc;

use crate::leadership::Role;
use crate::ledger::Ledger;
use crate::readiness::Readiness;
pub use mss_gate::InOffice;

/// The seconds a standby's 503 asks a client to wait (`Retry-After`) before trying again: a
/// takeover after a leader's death takes about a second once its session is dropped
/// (docs/ha.md), and a client behind a load balancer on `/readyz` reaches the new leader then.
pub const STANDBY_RETRY_AFTER_SECS: u64 = 2;

/// One term's parts.
pub struct Office {
    /// The epoch this term leads at (1 when no leadership is configured).
    pub epoch: i64,
    pub ledger: Ledger,
    /// The MSS adapter, gated on this term (see `mss_gate`).
    pub mss: Arc<dyn MssAdapter>,
    /// Ids whose cancellation the term's dispatcher must carry to the MSS.
    pub cancels: mpsc::UnboundedSender<i64>,
    /// What `/readyz` checks while this term lasts.
    pub readiness: Readiness,
    term: InOffice,
}

impl Office {
    pub fn new(
        epoch: i64,
        ledger: Ledger,
        mss: Arc<dyn MssAdapter>,
        cancels: mpsc::UnboundedSender<i64>,
        readiness: Readiness,
        term: InOffice,
    ) -> Office {
        Office {
            epoch,
            ledger,
            mss,
            cancels,
            readiness,
            term,
        }
    }

    /// Whether this term still holds office: a write is acknowledged only if it does after the
    /// ledger answered.
    pub fn holds(&self) -> bool {
        self.term.holds()
    }
}

/// Why a request was not served: this broker holds no office.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this broker is a standby{}: it neither takes writes nor serves reads; send them to the leader", led_at(*.epoch))]
pub struct Standby {
    /// The epoch it last led at or saw lost, if any.
    pub epoch: Option<i64>,
}

fn led_at(epoch: Option<i64>) -> String {
    epoch.map_or_else(String::new, |e| format!(" (it last led at epoch {e})"))
}

/// The office in force, if any, for the process's life.
#[derive(Default)]
pub struct OfficeSlot {
    current: RwLock<Option<Arc<Office>>>,
    /// The epoch last led (or lost) by this process.
    last_epoch: Mutex<Option<i64>>,
}

impl OfficeSlot {
    /// The office in force, or why none is.
    pub fn current(&self) -> Result<Arc<Office>, Standby> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        match &*current {
            Some(office) => Ok(office.clone()),
            None => Err(self.standby()),
        }
    }

    /// This process as a standby: the epoch it last led at.
    pub fn standby(&self) -> Standby {
        Standby {
            epoch: *self.last_epoch.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Note the role as the watch says it (the epoch a standby names).
    pub fn saw(&self, role: Role) {
        let epoch = match role {
            Role::Leader { epoch } | Role::Lost { epoch } => Some(epoch),
            Role::Standby => return,
        };
        *self.last_epoch.lock().unwrap_or_else(|e| e.into_inner()) = epoch;
    }

    /// Put `office` in force (it must hold office).
    pub fn publish(&self, office: Arc<Office>) {
        self.saw(Role::Leader {
            epoch: office.epoch,
        });
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(office);
    }

    /// End the office in force, in this order: no handler takes it from here on; then its term
    /// ends, so a write that took it before is not acknowledged and its adapter makes no
    /// further call. Returns it (its tasks are still to stop, its writer still to end).
    pub fn withdraw(&self) -> Option<Arc<Office>> {
        let office = self
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(o) = &office {
            o.term.end();
        }
        office
    }
}
