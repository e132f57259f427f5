//! How capsules on this node send messages (the runtime's [`MessagePort`]): `mesh://`
//! targets become tasks placed through the task service, after the sending node's grant
//! check; direct peers get A2A over HTTP.

use std::sync::Arc;

use murmur_protocol::task::{Sender, check_outgoing};
use murmur_protocol::{PeerUrl, PublicKey};

use murmur_config::clock;
use murmur_runtime::bindings::murmur::message::send::{Message, TaskResult};
use murmur_runtime::ports::{MessagePort, PortFuture};
use murmur_runtime::{DirectHttp, Installed};

use super::{NewTask, TaskService};
use crate::telemetry::{self, TraceContext};

/// The node's message port. The task service it places `mesh://` sends through exists
/// before the runtime (it needs only the task database and the network's handle).
#[derive(Debug)]
pub struct NodeMessages {
    direct: DirectHttp,
    authorities: Vec<PublicKey>,
    tasks: TaskService,
}

impl NodeMessages {
    /// A port whose grants must be signed by one of `authorities`.
    pub fn new(authorities: Vec<PublicKey>, tasks: TaskService) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self { direct: DirectHttp::new()?, authorities, tasks }))
    }
}

impl MessagePort for NodeMessages {
    fn send<'a>(
        &'a self,
        from: &'a Installed,
        traceparent: Option<String>,
        target: PeerUrl,
        message: Message,
    ) -> PortFuture<'a, Result<TaskResult, String>> {
        Box::pin(async move {
            let PeerUrl::Mesh { capsule, node } = &target else {
                let Some(url) = DirectHttp::endpoint(&target) else {
                    return Err(format!("'{target}' cannot be reached over HTTP"));
                };
                // Every outgoing hop carries the trace on: the current span's when spans
                // are exported, else a child of the task's (a new trace without one).
                let fallback =
                    traceparent.as_deref().and_then(TraceContext::parse).unwrap_or_else(TraceContext::root);
                return self.direct.post(&url, &telemetry::current_or(&fallback), message).await;
            };
            let name = &from.manifest.name;
            // The sending end's check, before anything leaves this node.
            check_outgoing(
                from.manifest.grant.as_ref(),
                &self.authorities,
                clock::now(),
                name,
                Some(&from.loaded.digest),
                &target,
            )
            .map_err(|refusal| format!("grant check failed ({}): {refusal}", refusal.check()))?;
            let grant =
                from.manifest.grant.clone().expect("check_outgoing refuses a capsule without a grant");
            let tasks = &self.tasks;
            let trace = traceparent
                .as_deref()
                .and_then(TraceContext::parse)
                .unwrap_or_else(TraceContext::root)
                .child();
            let view = tasks
                .submit(NewTask {
                    capsule: capsule.clone(),
                    pin: *node,
                    text: message.text,
                    message_id: message.message_id,
                    context: message.context_id,
                    sender: Sender::Capsule { name: name.clone(), grant },
                    origin: format!("{}/{name}", tasks.local()),
                    traceparent: Some(trace.header()),
                    settle_wait: std::time::Duration::ZERO,
                })
                .await
                .map_err(|err| format!("{target}: {err}"))?;
            Ok(TaskResult {
                task_id: view.snapshot.task.to_string(),
                context_id: view.snapshot.context,
                state: view.snapshot.state.as_str().to_owned(),
            })
        })
    }
}
