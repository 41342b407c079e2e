//! What a term of office does first with the sends an earlier broker marked (issue 42,
//! docs/ha.md, "How a new leader settles what the old one sent"): a request still `accepted`
//! with its attempt marked (`sent_attempt`) may or may not be at the MSS. Where the MSS
//! deduplicates by key (`Settling::dedup_by_key`), the submit loop sends it again with the same
//! key and attempt, and a transfer it already has is answered as a duplicate. Where it cannot,
//! sending it again could make a second transfer, and not sending it could lose one: the request
//! is flagged *unsettled* for an operator (`ledger::unsettled`), logged with its id, counted by
//! `mssbroker_unsettled_requests`, and resolved by `POST /v1/admin/requests/{id}/resend` or a
//! cancel (docs/operations.md, "Unsettled sends"). `submitted` and `running` requests need no
//! such step: their MSS id is recorded, and the event cursor and the status sweeps carry on.

use tracing::{info, warn};

use super::Dispatcher;
use crate::ledger::LedgerError;

impl Dispatcher {
    /// Settle the sends earlier brokers marked, before this term sends anything. Returns how
    /// many were flagged for an operator.
    pub async fn settle_marked_sends(&self) -> Result<usize, LedgerError> {
        let marked = self.ledger.marked_sends().await?;
        if marked.is_empty() {
            return Ok(0);
        }
        let adapter = self.adapter.name();
        if self.adapter.capabilities().settling.dedup_by_key {
            info!(
                requests = marked.len(),
                adapter,
                "sends an earlier broker marked go again with the same key and attempt: the mss \
                 answers a duplicate for those it has"
            );
            return Ok(0);
        }
        for (id, attempt) in &marked {
            warn!(
                request_id = id,
                attempt,
                adapter,
                "unsettled: an earlier broker may or may not have sent this request, and the mss \
                 can neither be asked about it nor deduplicate it; not sent again until an \
                 operator resolves it (docs/operations.md, Unsettled sends)"
            );
        }
        let reason = format!(
            "unsettled: an earlier broker marked this send and may or may not have made it; the \
             {adapter} adapter can neither ask the mss about it nor send it again without \
             risking a second transfer: held for an operator (resend, or cancel)"
        );
        let n = marked.len();
        self.ledger.flag_unsettled(marked, reason).await?;
        Ok(n)
    }
}
