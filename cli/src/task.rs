//! `mur send` and `mur task …`: tasks through a node's A2A endpoint (JSON-RPC 2.0, the
//! A2A 1.0 method names), the same interface any A2A client uses.

use std::io::{BufRead, BufReader};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::client::NodeArgs;
use murmur_api::exit::{CliError, CliResult};
use murmur_api::output::{Table, print_json};
use murmur_config::limits::CLI_RPC_TIMEOUT;

/// Exit code of `mur send --wait` when the task ended other than completed.
pub const TASK_NOT_COMPLETED: u8 = 3;

/// `mur send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The capsule: `mesh://NAME` (any node hosting it), `mesh://NAME@PEER` (that node), or
    /// `NAME`.
    pub target: String,
    /// The message text.
    pub text: String,
    /// Wait for the task to finish (or ask for input) and print its result.
    #[arg(long, conflicts_with = "stream")]
    pub wait: bool,
    /// Print every state change as it happens, until the task finishes.
    #[arg(long)]
    pub stream: bool,
    /// Message id (default: a new UUID). The same id sent again names the same task.
    #[arg(long, value_name = "ID")]
    pub message_id: Option<String>,
    /// Conversation (context) id.
    #[arg(long, value_name = "ID")]
    pub context: Option<String>,
    /// Answer a task waiting for input (its id) instead of starting a new one.
    #[arg(long, value_name = "TASK_ID")]
    pub reply_to: Option<String>,
    /// JSON output (one object; with --stream, one object per line).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// `mur task …`.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Show a task (asked of the node that owns it).
    Get {
        /// The task id.
        id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// List the tasks this node owns or placed, newest first.
    Ls {
        /// Only tasks in this state (submitted, working, input-required, completed,
        /// failed, canceled, rejected).
        #[arg(long, value_name = "STATE")]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100))]
        limit: u64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Cancel a task that has not started or waits for input.
    Cancel {
        /// The task id.
        id: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        node: NodeArgs,
    },
}

fn request(node: &NodeArgs, method: &str, params: Value) -> (String, Value) {
    let url = format!("{}/", node.url.trim_end_matches('/'));
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    (url, body)
}

fn unreachable_node(node: &NodeArgs, err: &reqwest::Error) -> CliError {
    CliError::failed(anyhow::anyhow!(
        "cannot reach the node at {} ({err}); is murnode running? (set --node or MURMUR_NODE)",
        node.url
    ))
}

/// A JSON-RPC error as the CLI shows it: message, and the failed check when there is one.
fn rpc_error(error: &Value) -> CliError {
    let message = error["message"].as_str().unwrap_or("unknown error");
    let code = error["code"].as_i64().unwrap_or(0);
    let text = match error["data"]["check"].as_str() {
        Some(check) => format!("{message} [code {code}, check {check}]"),
        None => format!("{message} [code {code}]"),
    };
    CliError::failed(anyhow::anyhow!(text))
}

/// Calls `method` and returns its result.
fn call(node: &NodeArgs, method: &str, params: Value) -> CliResult<Value> {
    let (url, body) = request(node, method, params);
    let response = node
        .client(Some(CLI_RPC_TIMEOUT))?
        .post(&url)
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .map_err(|e| unreachable_node(node, &e))?;
    let status = response.status();
    let text = response.text().context("reading the node's answer")?;
    let answer: Value = serde_json::from_str(&text).map_err(|_| {
        CliError::failed(anyhow::anyhow!(
            "the node answered {status}: {}",
            text.chars().take(300).collect::<String>()
        ))
    })?;
    if let Some(error) = answer.get("error") {
        if !status.is_success() {
            return Err(CliError::failed(anyhow::anyhow!(
                "the node answered {status}: {}",
                error["message"].as_str().unwrap_or("")
            )));
        }
        return Err(rpc_error(error));
    }
    Ok(answer["result"].clone())
}

/// A task's fields as `mur` shows them.
fn summary(task: &Value) -> (String, String, String, String, String) {
    let state = task["status"]["state"].as_str().unwrap_or("?");
    let state = state
        .strip_prefix("TASK_STATE_")
        .map_or_else(|| state.to_owned(), |s| s.to_lowercase().replace('_', "-"));
    let text = task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("").to_owned();
    (
        task["id"].as_str().unwrap_or("?").to_owned(),
        state,
        task["metadata"]["murmur"]["capsule"].as_str().unwrap_or("?").to_owned(),
        task["metadata"]["murmur"]["owner"].as_str().unwrap_or("?").to_owned(),
        text,
    )
}

fn print_task(task: &Value) {
    let (id, state, capsule, owner, text) = summary(task);
    println!("task {id}: {state}");
    println!("  capsule {capsule} on {owner}");
    if !text.is_empty() {
        let label = match state.as_str() {
            "completed" => "result",
            "input-required" => "asks",
            _ => "message",
        };
        println!("  {label}: {text}");
    }
}

fn finished_ok(task: &Value) -> CliResult {
    let (id, state, ..) = summary(task);
    match state.as_str() {
        "completed" | "input-required" | "submitted" | "working" => Ok(()),
        other => Err(CliError { code: TASK_NOT_COMPLETED, error: anyhow::anyhow!("task {id} is {other}") }),
    }
}

/// `mur send`.
pub fn send(args: SendArgs) -> CliResult {
    let mut message = json!({
        "role": "ROLE_USER",
        "messageId": args.message_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        "parts": [{ "text": args.text }],
    });
    if let Some(context) = &args.context {
        message["contextId"] = json!(context);
    }
    if let Some(task) = &args.reply_to {
        message["taskId"] = json!(task);
    }
    let tenant = args.target.clone();
    let params = json!({
        "tenant": tenant,
        "message": message,
        "configuration": { "returnImmediately": !args.wait },
    });
    if args.stream {
        return stream(&args, params);
    }
    let result = call(&args.node, "SendMessage", params)?;
    let task = result.get("task").cloned().unwrap_or(result);
    if args.json {
        print_json(&task);
    } else {
        print_task(&task);
    }
    if args.wait { finished_ok(&task) } else { Ok(()) }
}

/// `mur send --stream`: reads the SSE stream, one line per event.
fn stream(args: &SendArgs, params: Value) -> CliResult {
    let (url, body) = request(&args.node, "SendStreamingMessage", params);
    let response = args
        .node
        .client(None)?
        .post(&url)
        .header("A2A-Version", "1.0")
        .header("Accept", "text/event-stream")
        .json(&body)
        .send()
        .map_err(|e| unreachable_node(&args.node, &e))?;
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_sse {
        let answer: Value = serde_json::from_str(&response.text().unwrap_or_default())
            .map_err(|e| CliError::failed(anyhow::anyhow!("the node did not answer with a stream: {e}")))?;
        return Err(rpc_error(&answer["error"]));
    }
    let mut last: Option<Value> = None;
    let mut seq = String::new();
    for line in BufReader::new(response).lines() {
        let line = line.context("reading the stream")?;
        if let Some(id) = line.strip_prefix("id:") {
            seq = id.trim().to_owned();
            continue;
        }
        let Some(data) = line.strip_prefix("data:") else { continue };
        let answer: Value = serde_json::from_str(data.trim()).context("an event is not JSON")?;
        if let Some(error) = answer.get("error") {
            return Err(rpc_error(error));
        }
        let result = &answer["result"];
        if args.json {
            println!("{}", json!({ "seq": seq.parse::<u64>().ok(), "event": result }));
        }
        if let Some(task) = result.get("task") {
            if !args.json {
                let (id, state, capsule, owner, _) = summary(task);
                println!("[{seq}] task {id} ({capsule} on {owner}): {state}");
            }
            last = Some(task.clone());
        } else if let Some(update) = result.get("statusUpdate") {
            let mut task = json!({ "id": update["taskId"], "status": update["status"] });
            if let Some(previous) = &last {
                task["metadata"] = previous["metadata"].clone();
            }
            if !args.json {
                let (_, state, _, _, text) = summary(&task);
                if text.is_empty() {
                    println!("[{seq}] {state}");
                } else {
                    println!("[{seq}] {state}: {text}");
                }
            }
            last = Some(task);
        }
    }
    last.as_ref().map_or(Ok(()), finished_ok)
}

/// `mur task …`.
pub fn run(command: TaskCommand) -> CliResult {
    match command {
        TaskCommand::Get { id, json, node } => {
            let task = call(&node, "GetTask", json!({ "id": id }))?;
            if json {
                print_json(&task)
            } else {
                print_task(&task)
            }
            Ok(())
        }
        TaskCommand::Cancel { id, json, node } => {
            let task = call(&node, "CancelTask", json!({ "id": id }))?;
            if json {
                print_json(&task)
            } else {
                print_task(&task)
            }
            Ok(())
        }
        TaskCommand::Ls { state, limit, json, node } => {
            if let Some(state) = &state {
                state
                    .parse::<murmur_protocol::task::TaskState>()
                    .map_err(|e| CliError::usage(anyhow::anyhow!(e)))?;
            }
            let mut params = json!({ "pageSize": limit });
            if let Some(state) = state {
                params["status"] = json!(state);
            }
            let result = call(&node, "ListTasks", params)?;
            if json {
                print_json(&result);
                return Ok(());
            }
            let tasks = result["tasks"].as_array().cloned().unwrap_or_default();
            if tasks.is_empty() {
                println!("no tasks");
                return Ok(());
            }
            let mut table = Table::new(&["TASK", "STATE", "CAPSULE", "OWNER", "MESSAGE"]);
            for task in &tasks {
                let (id, state, capsule, owner, text) = summary(task);
                let short_owner: String =
                    owner.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
                let text: String = text.chars().take(48).collect();
                table.row(vec![id, state, capsule, format!("…{short_owner}"), text]);
            }
            table.print();
            Ok(())
        }
    }
}
