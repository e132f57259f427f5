//! How capsules on this node send messages (the runtime's [`MessagePort`]): `mesh://`
//! targets become tasks placed through the task service, after the sending node's grant
//! check; direct peers get A2A over HTTP.

use std::sync::Arc;

use murmur_protocol::task::{Sender, check_outgoing};
use murmur_protocol::{PeerUrl, PublicKey};

use murmur_config::clock;
use murmur_net::NetHandle;
use murmur_runtime::bindings::murmur::message::send::{Message, TaskResult};
use murmur_runtime::ports::{MessagePort, PortFuture};
use murmur_runtime::{DirectHttp, Installed};

use super::{CallError, NewTask, TaskService};
use crate::telemetry::{self, TraceContext};

/// The node's message port. The task service it places `mesh://` sends through exists
/// before the runtime (it needs only the task database and the network's handle).
#[derive(Debug)]
pub struct NodeMessages {
    direct: DirectHttp,
    authorities: Vec<PublicKey>,
    tasks: TaskService,
    /// For the revocation lists the mesh holds.
    net: NetHandle,
}

impl NodeMessages {
    /// A port whose grants must be signed by one of `authorities` and not revoked by the
    /// lists `net`'s mesh holds.
    pub fn new(authorities: Vec<PublicKey>, tasks: TaskService, net: NetHandle) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self { direct: DirectHttp::new()?, authorities, tasks, net }))
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
                let trace = outgoing_trace(telemetry::exporting(), traceparent.as_deref());
                return self.direct.post(&url, trace.as_ref(), message).await;
            };
            let name = &from.manifest.name;
            // The sending end's check, before anything leaves this node.
            check_outgoing(
                from.manifest.grant.as_ref(),
                &self.authorities,
                &self.net.revocations(),
                clock::now(),
                name,
                Some(&from.loaded.digest),
                &target,
            )
            .map_err(|refusal| format!("grant check failed ({}): {refusal}", refusal.check()))?;
            let grant =
                from.manifest.grant.clone().expect("check_outgoing refuses a capsule without a grant");
            let tasks = &self.tasks;
            let context = message.context_id.clone().unwrap_or_default();
            let trace = outgoing_trace(telemetry::exporting(), traceparent.as_deref());
            let submitted = tasks
                .submit(NewTask {
                    capsule: capsule.clone(),
                    pin: *node,
                    text: message.text,
                    message_id: message.message_id,
                    client: None,
                    context: message.context_id,
                    sender: Sender::Capsule { name: name.clone(), grant },
                    traceparent: trace.map(|t| t.header()),
                    settle_wait: std::time::Duration::ZERO,
                })
                .await;
            let view = match submitted {
                Ok(view) => view,
                // The target refused it (a check at its owner, or at the router: busy, not
                // hosted, a grant it does not accept): the specification's `rejected`.
                Err(CallError::Refused { check, reason }) => {
                    tracing::info!(capsule = %name, %target, %check, %reason, "message/send rejected by its target");
                    return Ok(TaskResult {
                        task_id: String::new(),
                        context_id: context,
                        state: "rejected".into(),
                    });
                }
                Err(err) => return Err(format!("{target}: {err}")),
            };
            Ok(TaskResult {
                task_id: view.snapshot.task.to_string(),
                context_id: view.snapshot.context,
                state: view.snapshot.state.as_str().to_owned(),
            })
        })
    }
}

/// The `traceparent` a capsule's message carries on: only while the node exports spans
/// (the runtime specification injects one only when OpenTelemetry is configured) — then
/// the current span's, or a child of the task's (a new trace when it had none).
fn outgoing_trace(exporting: bool, task: Option<&str>) -> Option<TraceContext> {
    if !exporting {
        return None;
    }
    let fallback = task.and_then(TraceContext::parse).unwrap_or_else(TraceContext::root);
    Some(telemetry::current_or(&fallback))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_carries_a_traceparent_only_while_spans_are_exported() {
        let task = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(outgoing_trace(false, Some(task)), None);
        assert_eq!(outgoing_trace(false, None), None);
        let on = outgoing_trace(true, Some(task)).expect("exporting: a traceparent");
        assert_eq!(on.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736", "the task's trace goes on");
        assert!(outgoing_trace(true, None).is_some(), "a new trace when the task had none");
    }
}
