//! The node's brains: the brain host's ports over the network. Messages to another node's
//! agents go out on `/murmur/agent/1` (resolved against the directory by the protocol's
//! rule); messages from peers come in through the network's [`AgentInbox`] port once it
//! checked that the sending peer advertises the sender.

use std::sync::Arc;

use murmur_brain::{
    AgentConfig, Brains, ChatStream, Delivery, Language, McpPort, Mesh, ResourceChange, ResourceWatch,
    SendError, SendErrorKind, Source,
};
use murmur_config::{AgentEntry, BrainRef};
use murmur_net::{AgentInbox, NetHandle, Sent};
use murmur_protocol::NodeId;
use murmur_protocol::agent::{AddressError, AgentAddress, AgentMessage, AgentResponse, AgentStatus};
use murmur_protocol::model::ChatRequest;
use murmur_runtime::brain::{ResourceContent, ResourceInfo};
use murmur_runtime::ports::PortFuture;

/// The brain host's way to other nodes: the network.
#[derive(Debug)]
pub struct NetMesh {
    net: NetHandle,
    models: Arc<crate::models::ModelRouter>,
    upstreams: Arc<crate::upstream::Upstreams>,
}

impl NetMesh {
    #[must_use]
    pub fn new(
        net: NetHandle,
        models: Arc<crate::models::ModelRouter>,
        upstreams: Arc<crate::upstream::Upstreams>,
    ) -> Arc<Self> {
        Arc::new(Self { net, models, upstreams })
    }
}

impl Mesh for NetMesh {
    fn send(
        &self,
        to: AgentAddress,
        local_runs: bool,
        message: AgentMessage,
    ) -> PortFuture<'_, Result<Delivery, SendError>> {
        Box::pin(async move {
            match self.net.send_agent(to, local_runs, message).await {
                Ok(Sent::Local) => Ok(Delivery::Local),
                Ok(Sent::Delivered(_)) => Ok(Delivery::Remote),
                Err(error) => {
                    let kind = match &error {
                        murmur_net::SendError::Address(AddressError::Ambiguous { .. }) => {
                            SendErrorKind::Ambiguous
                        }
                        murmur_net::SendError::Address(_) => SendErrorKind::Unknown,
                        murmur_net::SendError::Refused { check, .. } => {
                            murmur_brain::brains::refusal_kind(check)
                        }
                        murmur_net::SendError::Unreachable { .. }
                        | murmur_net::SendError::Overloaded(_)
                        | murmur_net::SendError::Stopped => SendErrorKind::Unreachable,
                    };
                    Err(SendError::new(kind, error.to_string()))
                }
            }
        })
    }

    fn local(&self) -> Option<NodeId> {
        Some(self.net.local())
    }

    fn open_chat(
        &self,
        agent: &str,
        provider: Option<String>,
        model: String,
        request: ChatRequest,
    ) -> PortFuture<'_, Result<Box<dyn ChatStream>, String>> {
        let agent = agent.to_owned();
        Box::pin(async move {
            if let Some(provider) = provider {
                return self.upstreams.open(&agent, &provider, &model, &request).await;
            }
            // Models of this node were opened by the brain host itself: only others here.
            let reply = self.models.open(None, &model, request).await.map_err(|e| e.to_string())?;
            Ok(Box::new(reply) as Box<dyn ChatStream>)
        })
    }
}

/// The brain host's way to the node's MCP servers.
#[derive(Debug)]
pub struct NodeMcp(pub Arc<murmur_mcp::Servers>);

impl McpPort for NodeMcp {
    fn call_tool(
        &self,
        server: &str,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> PortFuture<'_, Result<String, String>> {
        let (server, name) = (self.0.get(server).cloned(), name.to_owned());
        Box::pin(async move { server?.call_tool(&name, arguments).await })
    }

    fn watch(
        &self,
        server: &str,
        uri: Option<String>,
    ) -> PortFuture<'_, Result<Box<dyn ResourceWatch>, String>> {
        let server = self.0.get(server).cloned();
        Box::pin(async move {
            let server = server?;
            let watch = match uri {
                None => server.watch_list(),
                Some(uri) => server.watch_resource(&uri),
            };
            Ok(Box::new(McpWatch(watch)) as Box<dyn ResourceWatch>)
        })
    }
}

/// A watch of an MCP server, in the brain's types.
struct McpWatch(murmur_mcp::Watch);

impl ResourceWatch for McpWatch {
    fn next(&mut self) -> PortFuture<'_, Result<ResourceChange, String>> {
        Box::pin(async move {
            Ok(match self.0.next().await? {
                murmur_mcp::WatchEvent::List(list) => ResourceChange::List(
                    list.into_iter()
                        .map(|r| ResourceInfo {
                            uri: r.uri,
                            name: r.name,
                            mime_type: r.mime_type,
                            description: r.description,
                        })
                        .collect(),
                ),
                murmur_mcp::WatchEvent::Content(c) => ResourceChange::Content(ResourceContent {
                    uri: c.uri,
                    mime_type: c.mime_type,
                    content: c.content,
                }),
            })
        })
    }
}

/// Where the network delivers peers' agent messages: the brain host.
#[derive(Debug, Clone)]
pub struct BrainInbox(pub Brains);

impl AgentInbox for BrainInbox {
    fn deliver(&self, from: NodeId, message: AgentMessage) -> AgentResponse {
        self.0.deliver(from, message)
    }

    fn status(&self) -> Vec<AgentStatus> {
        self.0.status()
    }
}

/// The brain host's view of a configured agent.
#[must_use]
pub fn agent_config(entry: &AgentEntry) -> AgentConfig {
    let source = match &entry.brain {
        BrainRef::File(path) => Source::File(path.clone()),
        BrainRef::Stored { name, version } => Source::Stored { name: name.clone(), version: version.clone() },
    };
    AgentConfig {
        name: entry.name.clone(),
        source,
        language: entry.language.as_deref().and_then(|l| l.parse::<Language>().ok()),
        recv_timeout: entry.recv_timeout,
        inbox_max: entry.inbox_max,
        busy: entry.busy,
        memory_bytes: entry.memory_bytes,
        grace: entry.grace,
        tools: entry.tools.clone(),
        mcp: entry.mcp.clone(),
    }
}
