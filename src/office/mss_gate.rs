//! The MSS adapter as one term of office holds it: every call first reads the term's
//! [`InOffice`] flag and, once the term has ended, makes no call at all (`Unreachable`: nothing
//! was sent, so the request stays as it was for whoever leads next). A call that read the flag
//! before the flip may finish; none starts after it. This is what makes "no further MSS call"
//! hold at the instant of the flip, before the dispatcher's loops are even aborted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mss_adapters::{
    Capabilities, EventBatch, EventCursor, MssAdapter, MssError, Submitted, Transfer, TransferRef,
    TransferStatus,
};

/// Whether a term is still in office: set at its start, cleared once, at its end.
#[derive(Debug, Clone)]
pub struct InOffice(Arc<AtomicBool>);

impl InOffice {
    pub fn new() -> InOffice {
        InOffice(Arc::new(AtomicBool::new(true)))
    }

    pub fn holds(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// End the term: from this call on, [`InOffice::holds`] is false for every holder.
    pub fn end(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Default for InOffice {
    fn default() -> Self {
        InOffice::new()
    }
}

/// An adapter that calls `inner` only while `term` holds office.
pub struct Gated {
    inner: Arc<dyn MssAdapter>,
    term: InOffice,
}

impl Gated {
    pub fn new(inner: Arc<dyn MssAdapter>, term: InOffice) -> Gated {
        Gated { inner, term }
    }

    fn open(&self) -> Result<(), MssError> {
        if self.term.holds() {
            Ok(())
        } else {
            Err(MssError::Unreachable(
                "this broker's term of office has ended: nothing was sent".into(),
            ))
        }
    }
}

#[async_trait]
impl MssAdapter for Gated {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn submit(&self, transfer: &Transfer) -> Result<Submitted, MssError> {
        self.open()?;
        self.inner.submit(transfer).await
    }

    async fn submit_batch(&self, transfers: &[Transfer]) -> Vec<Result<Submitted, MssError>> {
        match self.open() {
            Ok(()) => self.inner.submit_batch(transfers).await,
            Err(e) => transfers.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn room(&self) -> Option<usize> {
        self.inner.room()
    }

    async fn room_freed(&self) {
        self.inner.room_freed().await
    }

    fn check_file(&self, file: &str) -> Result<(), String> {
        self.inner.check_file(file)
    }

    fn check_local_file(&self, local_file: &str) -> Result<(), String> {
        self.inner.check_local_file(local_file)
    }

    fn check_local_file_for(&self, station: &str, local_file: &str) -> Result<(), String> {
        self.inner.check_local_file_for(station, local_file)
    }

    async fn cancel(&self, transfer: &TransferRef) -> Result<(), MssError> {
        self.open()?;
        self.inner.cancel(transfer).await
    }

    fn cancel_reaches_mss(&self) -> bool {
        self.inner.cancel_reaches_mss()
    }

    async fn reprioritize(&self, transfer: &TransferRef, priority: i64) -> Result<(), MssError> {
        self.open()?;
        self.inner.reprioritize(transfer, priority).await
    }

    async fn release(&self, transfer: &TransferRef) -> Result<(), MssError> {
        self.open()?;
        self.inner.release(transfer).await
    }

    async fn status(&self, transfer: &TransferRef) -> Result<Option<TransferStatus>, MssError> {
        self.open()?;
        self.inner.status(transfer).await
    }

    async fn events(&self, cursor: &EventCursor, wait: Duration) -> Result<EventBatch, MssError> {
        self.open()?;
        self.inner.events(cursor, wait).await
    }
}
