//! Accepting new requests: a replay answers with the stored request; a request past a
//! queued-bytes cap, or a read whose station-side copy another unfinished read writes
//! (`outputs`), is refused; otherwise the request is held (a feasibility cap), queued (the held
//! release mode) or decided and charged now.

use crate::ledger::db::{params, DbResult};

use super::idempotency::fingerprint;
use super::queued;
use super::state::{Charge, Txn};
use super::Admitted;
use crate::domain::{Class, RequestState};
use crate::domain::{GroupId, GroupKind};
use crate::ledger::aggregates::HourRow;
use crate::ledger::columns::{self, NewRow};
use crate::ledger::read::{parse_class, parse_state};
use crate::ledger::{Accepted, NewRequest, Refused};
use crate::policy;
use crate::policy::order::{is_fair, Candidate};
use crate::policy::transition::{rider_charged_on_joining, CarrierView};
use crate::shares::limits::held_by;

/// How a new request is recorded: its (possibly provisional) decision, its state and what it
/// is charged now.
struct Entry {
    decision: policy::Decision,
    state: RequestState,
    benefit: u64,
    bytes: u64,
    charged_ms: Option<i64>,
    explain: Option<String>,
    held_reason: Option<String>,
    /// The request whose transfer it rides on (state `riding`).
    rides_on: Option<i64>,
}

impl Txn<'_, '_> {
    /// Record one new request (a replay answers with the stored one; the queued-bytes caps are
    /// checked after it, so a replay is never refused).
    pub fn accept_one(&mut self, item: &NewRequest) -> DbResult<Admitted> {
        let fp = fingerprint(&item.station, &item.client_request_id);
        if let Some(a) = self.replay_of(fp, item)? {
            return Ok(Ok(a));
        }
        let owner = queued::Owner {
            station: &item.station,
            user: &item.user,
        };
        let caps = queued::check(
            self.policy,
            &self.st.queued,
            item.group,
            owner,
            item.size_bytes,
        );
        if let Err(refused) = caps {
            return Ok(Err(refused.into()));
        }
        if let Some(in_use) = self.output_in_use(item)? {
            return Ok(Err(Refused::OutputInUse(in_use)));
        }
        let mut candidate = self.candidate(item);
        let entry = self.entry(item, &candidate);
        let entry = match entry.state {
            RequestState::Held => entry,
            _ => match self.carrier_for(item)? {
                Some(carrier) => self.riding(item, &candidate, carrier),
                None => entry,
            },
        };
        let id = self.insert(item, &entry, candidate.slots)?;
        self.note(id);
        self.hold_output(item, id);
        self.tx.insert(
            "INSERT INTO idempotency (id, fingerprint) VALUES (?1, ?2)",
            params![id, fp as i64],
        )?;
        self.st.remember(fp, id);
        if matches!(entry.state, RequestState::Accepted | RequestState::Queued) {
            self.offer_new(item, id, entry.state == RequestState::Queued);
        }
        candidate.id = id;
        self.record_accepted(&entry, candidate, item);
        let path = self.policy.group(item.group).path.as_str();
        self.queued_moved((path, owner, item.size_bytes), None, entry.state);
        Ok(Ok(Accepted {
            id,
            group: self.policy.group(item.group).path.to_string(),
            class: entry.decision.class,
            mss_priority: entry.decision.mss_priority,
            state: entry.state,
            duplicate: false,
            held_reason: entry.held_reason,
        }))
    }

    /// The request as the ordering sees it (its id is not known yet).
    fn candidate(&self, item: &NewRequest) -> Candidate {
        let order = &self.policy.order;
        Candidate {
            id: 0,
            group: item.group,
            library: item.extras.library.clone(),
            created_ms: self.now,
            size_bytes: item.size_bytes,
            benefit: item.benefit,
            qos: order.qos(item.extras.qos, &item.access_mode),
            user: item.extras.user_factor.unwrap_or(1.0),
            queue: order.queue_factor(&item.access_mode),
            slots: order.release.slots(&item.extras.library, item.size_bytes),
            passed: 0,
        }
    }

    /// Held (feasibility cap) and queued (held and volumes release modes) requests are neither decided nor
    /// charged until released; their class and priority are provisional.
    fn entry(&self, item: &NewRequest, candidate: &Candidate) -> Entry {
        let provisional = Entry {
            decision: policy::Decision {
                class: Class::Back,
                mss_priority: self.policy.p_back,
            },
            state: RequestState::Held,
            benefit: 0,
            bytes: 0,
            charged_ms: None,
            explain: None,
            held_reason: self.hold_reason(item.group, item.benefit),
            rides_on: None,
        };
        if provisional.held_reason.is_some() {
            return provisional;
        }
        let waits = self.policy.order.held() || self.policy.order.volumes();
        if waits && is_fair(self.policy, item.group) {
            return Entry {
                state: RequestState::Queued,
                ..provisional
            };
        }
        let p = self.placement(candidate);
        Entry {
            decision: policy::Decision {
                class: p.class,
                mss_priority: p.mss_priority,
            },
            state: RequestState::Accepted,
            benefit: item.benefit,
            bytes: item.size_bytes,
            charged_ms: Some(self.now),
            explain: super::explain_text(&p),
            held_reason: None,
            rides_on: None,
        }
    }

    /// A duplicate read riding on `carrier`: decided now, and charged now, like a request
    /// released with it, if the carrier is decided; else charged when the carrier is released
    /// (`super::coalesce`).
    fn riding(
        &self,
        item: &NewRequest,
        candidate: &Candidate,
        (carrier, view): (i64, CarrierView),
    ) -> Entry {
        let charged = rider_charged_on_joining(view);
        let p = self.placement(candidate);
        let (benefit, bytes) = if charged {
            (item.benefit, item.size_bytes)
        } else {
            (0, 0)
        };
        Entry {
            decision: policy::Decision {
                class: p.class,
                mss_priority: p.mss_priority,
            },
            state: RequestState::Riding,
            benefit,
            bytes,
            charged_ms: charged.then_some(self.now),
            explain: super::explain_text(&p),
            held_reason: None,
            rides_on: Some(carrier),
        }
    }

    /// The new row; returns its id.
    fn insert(&self, item: &NewRequest, e: &Entry, slots: u32) -> DbResult<i64> {
        let row = NewRow {
            item,
            group_path: self.policy.group(item.group).path.as_str(),
            class: e.decision.class,
            mss_priority: e.decision.mss_priority,
            charged: e.benefit as i64,
            charged_bytes: e.bytes as i64,
            state: e.state,
            created_ms: self.now,
            charged_ms: e.charged_ms,
            held_reason: e.held_reason.as_deref(),
            slots,
            explain: e.explain.as_deref(),
            rides_on: e.rides_on,
        };
        // Each backend's own way to the new id (`Db::insert_id`): SQLite's `last_insert_rowid()`,
        // kept over `RETURNING id`, with which batch ingest measured about a quarter slower
        // (docs/ha.md, step 2); PostgreSQL's id reserved beforehand, the row gathered with the
        // group's others into one statement over arrays (`db/pg/batch.rs`).
        self.tx.insert_id(columns::insert_sql(), row.values())
    }

    /// Count, queue and charge a request just inserted.
    fn record_accepted(&mut self, e: &Entry, candidate: Candidate, item: &NewRequest) {
        let path = self.policy.group(candidate.group).path.as_str();
        let held = i64::from(e.state == RequestState::Held);
        let row = HourRow {
            accepted: 1,
            held,
            ..HourRow::default()
        };
        let (library, slots) = (candidate.library.clone(), candidate.slots);
        match e.state {
            RequestState::Accepted => {
                self.report
                    .add(path, self.now, row.decided(e.decision.class));
                self.moved(e.decision.class, None, RequestState::Accepted);
                self.occupy(&library, slots, true);
            }
            RequestState::Queued => {
                self.report.add(path, self.now, row);
                let (volume, position) = (item.volume.as_deref(), item.extras.position);
                self.enqueue_new(candidate, volume, position, true);
            }
            RequestState::Riding => {
                let row = HourRow {
                    coalesced: 1,
                    ..row.decided(e.decision.class)
                };
                self.report.add(path, self.now, row);
            }
            _ => self.report.add(path, self.now, row),
        }
        self.charge(
            path,
            Charge {
                usage: i128::from(e.benefit),
                at_ms: self.now,
                bytes: i128::from(e.bytes),
                pending: 1,
                held,
            },
        );
        self.ready |= e.state == RequestState::Accepted;
    }

    /// Why a new request of group `g` charging `benefit` is held: a feasibility cap on its path is
    /// reached or would be passed with the request counted, or
    /// earlier requests of the group are held (they are released first, in order).
    fn hold_reason(&self, g: GroupId, benefit: u64) -> Option<String> {
        let policy = self.policy;
        if !matches!(policy.group(g).kind, GroupKind::FairShare { .. }) {
            return None; // priority classes are never held
        }
        if let Some(reason) = held_by(policy, &self.st.usage.at(self.now), g, benefit) {
            return Some(reason);
        }
        let waiting = self.st.held.get(g.0).copied().unwrap_or(0);
        (waiting > 0).then(|| {
            format!(
                "behind {waiting} held request(s) of `{}`, released in order",
                policy.group(g).path
            )
        })
    }

    /// The stored request this one replays, if any: an unfinished one with its fingerprint (in
    /// memory), else a finished one (on disk).
    fn replay_of(&self, fp: u64, item: &NewRequest) -> DbResult<Option<Accepted>> {
        let unfinished: Vec<i64> = self.st.idempotency.candidates(fp).collect();
        for id in unfinished {
            if let Some(a) = self.replayed(id, item)? {
                return Ok(Some(a));
            }
        }
        for id in self.finished_with(fp)? {
            if let Some(a) = self.replayed(id, item)? {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }

    /// The stored request `id`, if it really is this station's `client_request_id` (a
    /// fingerprint hit is confirmed against the row).
    fn replayed(&self, id: i64, item: &NewRequest) -> DbResult<Option<Accepted>> {
        self.tx.query_opt(
            "SELECT id, group_path, class, mss_priority, state, held_reason FROM requests \
             WHERE id = ?1 AND station = ?2 AND client_request_id = ?3",
            params![id, item.station, item.client_request_id],
            |r| {
                Ok(Accepted {
                    id: r.get(0)?,
                    group: r.get(1)?,
                    class: parse_class(2, &r.get::<String>(2)?)?,
                    mss_priority: r.get(3)?,
                    state: parse_state(4, &r.get::<String>(4)?)?,
                    duplicate: true,
                    held_reason: r.get(5)?,
                })
            },
        )
    }
}
