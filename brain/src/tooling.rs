//! `murmur:brain/tooling`: a brain's tools and resources. `call-tool` queues a call and
//! answers at once with its UUID; the result arrives later as `tool-result` (or `error`)
//! tagged with it. `subscribe-*` opens a watch whose first event is the current state
//! (the list, or the resource's content) and whose next events are its changes.
//!
//! Two kinds of server answer, by the name a brain passes:
//!
//! - `""`: the node's own tool capsules, through the runtime's tool registry — the ones
//!   the agent's `tools` allowlist names (`[[agents]] tools = ["wordcount", "text-*"]`).
//! - any other name: an MCP server configured on the node (`[[mcp]]`) that the agent's
//!   `mcp` list names, reached through the [`McpPort`] the node implements.
//!
//! Every call and watch is a job of the run (`JobKind`): bounded per run, aborted when
//! the run ends, its events paced by the brain's reading.

use std::sync::Arc;

use murmur_config::limits::{MCP_ANSWER_BYTES_MAX, RESOURCE_WATCHES_PER_RUN_MAX, TOOL_CALLS_PER_RUN_MAX};
use murmur_runtime::brain::{BrainToolResult, Event, ResourceContent, ResourceInfo};
use murmur_runtime::ports::PortFuture;

use crate::agent::{Agent, JobKind};
use crate::brains::Inner;

/// The server name of the node's own tool capsules.
pub const CAPSULE_TOOLS: &str = "";

/// One change a resource watch reports.
#[derive(Clone, Debug)]
pub enum ResourceChange {
    /// The server's resource list, whole.
    List(Vec<ResourceInfo>),
    /// One resource, freshly read.
    Content(ResourceContent),
}

/// An open watch: the current state first, then each change; `Err` when it ended (the
/// server went away for good, or failed), with why.
pub trait ResourceWatch: Send {
    fn next(&mut self) -> PortFuture<'_, Result<ResourceChange, String>>;
}

/// How the brain host reaches the MCP servers configured on the node: the node
/// implements it over `murmur-mcp`. The host checked the agent's allowlist first.
pub trait McpPort: Send + Sync + std::fmt::Debug {
    /// Calls tool `name` of `server` with `arguments` (a JSON object's text): the tool's
    /// text, or why it failed (a tool that reported an error included).
    fn call_tool(
        &self,
        server: &str,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> PortFuture<'_, Result<String, String>>;

    /// Watches `server`'s resource list (`uri` none) or resource `uri`.
    fn watch(
        &self,
        server: &str,
        uri: Option<String>,
    ) -> PortFuture<'_, Result<Box<dyn ResourceWatch>, String>>;
}

/// A node without MCP servers.
#[derive(Debug, Default)]
pub struct NoMcp;

impl McpPort for NoMcp {
    fn call_tool(
        &self,
        server: &str,
        _name: &str,
        _arguments: serde_json::Map<String, serde_json::Value>,
    ) -> PortFuture<'_, Result<String, String>> {
        let error = no_server(server);
        Box::pin(async move { Err(error) })
    }

    fn watch(
        &self,
        server: &str,
        _uri: Option<String>,
    ) -> PortFuture<'_, Result<Box<dyn ResourceWatch>, String>> {
        let error = no_server(server);
        Box::pin(async move { Err(error) })
    }
}

fn no_server(server: &str) -> String {
    format!("no MCP server `{server}` is configured on this node")
}

/// Checks that `agent` may use `server` (and, for capsule tools, tool `name`).
fn allowed(agent: &Agent, server: &str, name: Option<&str>) -> Result<(), String> {
    let me = agent.name();
    if server == CAPSULE_TOOLS {
        let Some(name) = name else {
            return Err("the node's tool capsules have no resources: name an MCP server".into());
        };
        let allows = agent.config.tools.iter().any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => entry == name,
        });
        if !allows {
            return Err(format!(
                "tool policy: `{name}` is not in the `tools` of agent `{me}` (add it to its [[agents]] entry)"
            ));
        }
        return Ok(());
    }
    if !agent.config.mcp.iter().any(|s| s == server) {
        return Err(format!(
            "tool policy: MCP server `{server}` is not in the `mcp` of agent `{me}` (add it to its [[agents]] entry)"
        ));
    }
    Ok(())
}

/// `tooling.call-tool`: checks, then queues the call as a job; its UUID.
pub(crate) fn call_tool(
    node: &Arc<Inner>,
    agent: &Arc<Agent>,
    server: String,
    name: String,
    arguments: String,
) -> Result<String, String> {
    allowed(agent, &server, Some(&name))?;
    if arguments.len() > MCP_ANSWER_BYTES_MAX {
        return Err(format!("arguments are at most {MCP_ANSWER_BYTES_MAX} bytes, these {}", arguments.len()));
    }
    // An MCP tool takes a JSON object (none given: an empty one); a capsule takes its
    // input's text as it is.
    let object = if server == CAPSULE_TOOLS {
        None
    } else {
        let text = if arguments.trim().is_empty() { "{}" } else { arguments.as_str() };
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(_) => return Err("the arguments of an MCP tool are a JSON object".into()),
            Err(e) => return Err(format!("the arguments are not JSON: {e}")),
        }
    };
    let (host, me) = (node.clone(), agent.clone());
    agent.spawn_job(node, JobKind::ToolCall, TOOL_CALLS_PER_RUN_MAX, |id| async move {
        let outcome = match object {
            None => capsule_tool(&host, &name, &arguments).await,
            Some(object) => host.mcp.call_tool(&server, &name, object).await,
        };
        drop(host);
        let event = match outcome.and_then(|value| within_bound("the tool's result", value)) {
            Ok(value) => Event::ToolResult(BrainToolResult { name, arguments, value }),
            Err(error) => Event::Error(error),
        };
        me.push_paced(id, event).await;
    })
}

/// Tool capsule `name` of this node run on `arguments`: its data when it passed, else why not.
async fn capsule_tool(node: &Inner, name: &str, arguments: &str) -> Result<String, String> {
    let input = murmur_runtime::ToolInput { data: Some(arguments.to_owned()), log_path: None };
    let run = node.runtime.run_tool(name, input).await.map_err(|e| format!("tool `{name}`: {e}"))?;
    let result = run.result;
    if result.status != "passed" {
        let why = result.summary.or(result.data).unwrap_or_else(|| "no reason given".into());
        return Err(format!("tool `{name}` {}: {why}", result.status));
    }
    Ok(result.data.or(result.summary).unwrap_or_default())
}

fn within_bound(what: &str, text: String) -> Result<String, String> {
    if text.len() > MCP_ANSWER_BYTES_MAX {
        return Err(format!(
            "{what} is {} bytes, more than the {MCP_ANSWER_BYTES_MAX} a brain is given",
            text.len()
        ));
    }
    Ok(text)
}

/// `tooling.subscribe-resource-list` (`uri` none) and `subscribe-resource`: checks, then
/// opens the watch as a job; its UUID.
pub(crate) fn subscribe(
    node: &Arc<Inner>,
    agent: &Arc<Agent>,
    server: String,
    uri: Option<String>,
) -> Result<String, String> {
    allowed(agent, &server, None)?;
    if let Some(uri) = &uri
        && (uri.is_empty() || uri.len() > 2048)
    {
        return Err("a resource URI is 1 to 2048 bytes".into());
    }
    let mcp = node.mcp.clone();
    let me = agent.clone();
    agent.spawn_job(node, JobKind::ResourceWatch, RESOURCE_WATCHES_PER_RUN_MAX, |id| async move {
        let opened = mcp.watch(&server, uri).await;
        let mut watch = match opened {
            Ok(watch) => watch,
            Err(error) => return me.push_paced(id, Event::Error(error)).await,
        };
        loop {
            let event = match watch.next().await {
                Ok(ResourceChange::List(list)) => Event::ResourceListUpdated(list),
                Ok(ResourceChange::Content(content)) => Event::ResourceUpdated(content),
                Err(error) => return me.push_paced(id, Event::Error(error)).await,
            };
            me.push_paced(id.clone(), event).await;
        }
    })
}

/// `tooling.unsubscribe-resource`: true when `id` was an open watch of this run.
pub(crate) fn unsubscribe(agent: &Agent, id: &str) -> bool {
    agent.cancel_job(id, JobKind::ResourceWatch)
}
