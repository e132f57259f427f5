//! The port through which task requests from the network reach whoever owns this node's
//! tasks. The driver makes the receiving end's checks (it holds the directory the grant
//! checks read), then hands what passed to a [`TaskOwner`] in a spawned task, so the
//! driver never waits on an owner's disk or on a task settling.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use murmur_protocol::NodeId;
use murmur_protocol::task::{Submit, TaskRequest, TaskResponse, TaskSnapshot};

/// A boxed future an owner returns; the driver spawns it.
pub type OwnerFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Whoever owns this node's tasks (the node's task service).
pub trait TaskOwner: Send + Sync + 'static {
    /// Accepts `submit`, delivered by this node's own router, once the receiving checks
    /// passed: its snapshot once the acceptance is durable, or the refusal as
    /// `(check, reason)`.
    fn accept(&self, submit: Submit) -> OwnerFuture<Result<TaskSnapshot, (String, String)>>;

    /// Answers `request` from peer `from`, which arrived at `arrived` (a submit has passed
    /// the receiving checks). The answer must come in time for the peer's request timeout.
    fn answer(&self, from: NodeId, request: TaskRequest, arrived: Instant) -> OwnerFuture<TaskResponse>;

    /// The load this node advertises: tasks running and queued, in thousandths of its
    /// workers (capped at 1,000).
    fn load_permille(&self) -> u16;
}
