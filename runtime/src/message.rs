//! `murmur:message/send`: tasks to peer capsules.
//!
//! The host checks the target against the sender's `capabilities.network.allow` before
//! anything is sent, then hands the message to the runtime's
//! [`MessagePort`](super::ports::MessagePort). [`DirectHttp`] speaks A2A JSON-RPC 2.0
//! `message/send` over HTTP to direct peers (`HOST:PORT`, `http(s)://…`); it is the whole
//! port outside a node, and the node's port uses it for direct peers while `mesh://`
//! targets go through the mesh's task router (behind the same allowlist check).

use murmur_api::TraceContext;

use murmur_protocol::PeerUrl;
use murmur_protocol::peer_url::allowed;
use serde_json::{Value, json};
use wasmtime::Result;

use super::Installed;
use super::bindings::murmur::message::send::{self, Message, TaskResult};
use super::ports::{MessagePort, PortFuture};
use super::state::HostState;
use murmur_config::limits::{MESSAGE_BYTES_MAX, MESSAGE_RESPONSE_BYTES_MAX, MESSAGE_SEND_TIMEOUT};

impl send::Host for HostState {
    async fn send(&mut self, peer_url: String, message: Message) -> Result<Result<TaskResult, String>> {
        let manifest = &self.call.capsule.manifest;
        let target = match peer_url.parse::<PeerUrl>() {
            Ok(target) if allowed(&manifest.capabilities.network, &target) => target,
            // The same refusal for a URL that does not parse: it cannot be on the list.
            _ => return Ok(Err(format!("network policy: '{peer_url}' not in capabilities.network.allow"))),
        };
        if message.text.len() > MESSAGE_BYTES_MAX {
            return Ok(Err(format!(
                "message text is {} bytes, more than {MESSAGE_BYTES_MAX}",
                message.text.len()
            )));
        }
        let port = self.call.runtime.ports.messages.clone();
        let from = self.call.capsule.clone();
        let traceparent = self.call.task.as_ref().and_then(|t| t.traceparent());
        Ok(port.send(&from, traceparent, target, message).await)
    }
}

/// Sends to direct peers with A2A JSON-RPC over HTTP; refuses `mesh://` targets.
#[derive(Debug, Clone)]
pub struct DirectHttp {
    client: reqwest::Client,
}

impl DirectHttp {
    /// A sender with its own HTTP client.
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self { client: reqwest::Client::builder().timeout(MESSAGE_SEND_TIMEOUT).build()? })
    }

    /// The endpoint of a direct target.
    #[must_use]
    pub fn endpoint(target: &PeerUrl) -> Option<String> {
        match target {
            PeerUrl::Direct { host, port } => Some(format!("http://{host}:{port}/")),
            PeerUrl::Http { .. } => Some(target.to_string()),
            PeerUrl::Mesh { .. } => None,
        }
    }

    /// Posts `message/send` to a direct peer's A2A endpoint, with `traceparent` as the
    /// header of this hop when given (the caller's choice: a node continues its current
    /// span when it exports spans, and sends none otherwise).
    pub async fn post(
        &self,
        url: &str,
        traceparent: Option<&TraceContext>,
        message: Message,
    ) -> Result<TaskResult, String> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": message.message_id,
            "method": "message/send",
            "params": { "message": {
                "kind": "message",
                "role": "user",
                "messageId": message.message_id,
                "contextId": message.context_id,
                "parts": [{ "kind": "text", "text": message.text }],
            }},
        });
        let mut request = self.client.post(url).json(&body);
        if let Some(trace) = traceparent {
            request = request.header("traceparent", trace.header());
        }
        let mut response = request.send().await.map_err(|e| format!("cannot reach {url}: {e}"))?;
        let mut bytes = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|e| format!("reading the answer of {url}: {e}"))?
        {
            if bytes.len() + chunk.len() > MESSAGE_RESPONSE_BYTES_MAX {
                return Err(format!("the answer of {url} is larger than {MESSAGE_RESPONSE_BYTES_MAX} bytes"));
            }
            bytes.extend_from_slice(&chunk);
        }
        let answer: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("{url} did not answer JSON-RPC: {e}"))?;
        parse_answer(&answer, &message).map_err(|e| format!("{url}: {e}"))
    }
}

impl MessagePort for DirectHttp {
    fn send<'a>(
        &'a self,
        _from: &'a Installed,
        traceparent: Option<String>,
        target: PeerUrl,
        message: Message,
    ) -> PortFuture<'a, Result<TaskResult, String>> {
        Box::pin(async move {
            let Some(url) = Self::endpoint(&target) else {
                return Err(format!("'{target}' is a mesh target; this node has no mesh task router"));
            };
            // Outside a node nothing exports spans: no `traceparent` (the specification
            // injects one only when OpenTelemetry is configured).
            let _ = traceparent;
            self.post(&url, None, message).await
        })
    }
}

/// Reads a JSON-RPC answer to `message/send`: a Task (its state), a Message (completed),
/// or an error: the peer's refusal, which is the state `rejected` (no task), not an `Err`
/// (that is for a send that failed: no answer, or no JSON-RPC).
fn parse_answer(answer: &Value, message: &Message) -> Result<TaskResult, String> {
    if let Some(error) = answer.get("error") {
        tracing::info!(
            code = error["code"].as_i64().unwrap_or(0),
            reason = error["message"].as_str().unwrap_or("no message"),
            "message/send: the peer rejected the message"
        );
        return Ok(rejected(message));
    }
    let result = answer.get("result").ok_or("answer has neither result nor error")?;
    let context =
        || result["contextId"].as_str().or(message.context_id.as_deref()).unwrap_or_default().to_owned();
    match result["kind"].as_str() {
        Some("task") | None if result.get("status").is_some() => Ok(TaskResult {
            task_id: result["id"].as_str().unwrap_or_default().to_owned(),
            context_id: context(),
            state: result["status"]["state"].as_str().unwrap_or("unknown").to_owned(),
        }),
        Some("message") => {
            Ok(TaskResult { task_id: String::new(), context_id: context(), state: "completed".into() })
        }
        _ => Err("answer is neither a task nor a message".into()),
    }
}

/// The answer to a message the target refused: no task was made.
#[must_use]
pub fn rejected(message: &Message) -> TaskResult {
    TaskResult {
        task_id: String::new(),
        context_id: message.context_id.clone().unwrap_or_default(),
        state: "rejected".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Message {
        Message { message_id: "m1".into(), context_id: Some("c1".into()), text: "hi".into() }
    }

    #[test]
    fn answers_map_to_task_results() {
        let task = json!({"jsonrpc":"2.0","id":"m1","result":{"kind":"task","id":"t9","contextId":"c1","status":{"state":"submitted"}}});
        assert_eq!(parse_answer(&task, &message()).unwrap().state, "submitted");
        let reply = json!({"jsonrpc":"2.0","id":"m1","result":{"kind":"message","role":"agent","parts":[]}});
        assert_eq!(parse_answer(&reply, &message()).unwrap().state, "completed");
        let error = json!({"jsonrpc":"2.0","id":"m1","error":{"code":-32001,"message":"no"}});
        let refused = parse_answer(&error, &message()).unwrap();
        assert_eq!(
            (refused.state.as_str(), refused.task_id.as_str(), refused.context_id.as_str()),
            ("rejected", "", "c1")
        );
        assert!(parse_answer(&json!({"jsonrpc":"2.0","id":"m1"}), &message()).is_err());
    }

    #[test]
    fn direct_targets_have_endpoints() {
        assert_eq!(
            DirectHttp::endpoint(&"localhost:9000".parse().unwrap()).unwrap(),
            "http://localhost:9000/"
        );
        assert_eq!(DirectHttp::endpoint(&"https://a.b/x".parse().unwrap()).unwrap(), "https://a.b/x");
        assert!(DirectHttp::endpoint(&"mesh://echo".parse().unwrap()).is_none());
    }
}
