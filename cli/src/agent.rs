//! `mur agent`: the long-running agents (brains) of the mesh — list them, message them as
//! this node's clients (`mur`), read their logs and their memory.

use clap::{Args, Subcommand};
use murmur_api::exit::{CliError, CliResult};
use murmur_api::output::{Table, print_json};
use murmur_api::views::{AgentLogLine, AgentMemoryView, AgentsView};

use super::client::NodeArgs;

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Every agent of the mesh: name, node, brain, language, state, restarts.
    ///
    /// Example:
    ///   mur agent ls --json
    #[command(verbatim_doc_comment)]
    Ls(LsArgs),
    /// Send TEXT to agent NAME (or NAME@PEER), wherever it runs, as this node's clients:
    /// it lands only if the agent subscribed to `mur` (`subscribe-agent("mur")`).
    ///
    /// Example:
    ///   mur agent send planner "summarise today"
    #[command(verbatim_doc_comment)]
    Send(SendArgs),
    /// The log of agent NAME of this node: what its brain logged and what the node says
    /// about its runs (started, reloaded, restarted and why).
    ///
    /// Example:
    ///   mur agent logs planner --lines 50 --follow
    #[command(verbatim_doc_comment)]
    Logs(LogsArgs),
    /// What agent NAME of this node keeps in its memory (one KEY, or every key).
    ///
    /// Example:
    ///   mur agent memory planner last_plan
    #[command(verbatim_doc_comment)]
    Memory(MemoryArgs),
}

#[derive(Debug, Args)]
pub struct LsArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// One JSON object per agent instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The agent: NAME, or NAME@PEER when several nodes run one of that name.
    name: String,
    /// The message's text.
    text: String,
    #[command(flatten)]
    node: NodeArgs,
    /// Print the node's answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// An agent of this node.
    name: String,
    /// Lines to show (the node keeps the last 1000).
    #[arg(long, default_value_t = 100)]
    lines: usize,
    /// Keep printing lines as they come, until interrupted.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    node: NodeArgs,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// An agent of this node.
    name: String,
    /// One key (else every key).
    key: Option<String>,
    #[command(flatten)]
    node: NodeArgs,
    /// One JSON object per key.
    #[arg(long)]
    json: bool,
}

pub fn run(command: AgentCommand) -> CliResult {
    match command {
        AgentCommand::Ls(args) => ls(&args),
        AgentCommand::Send(args) => send(&args),
        AgentCommand::Logs(args) => logs(&args),
        AgentCommand::Memory(args) => memory(&args),
    }
}

fn segment(name: &str) -> CliResult<&str> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b)) {
        return Err(CliError::usage(anyhow::anyhow!(
            "`{name}` is not an agent name (a-z, 0-9, `-`, `_`, `.`, and @PEER)"
        )));
    }
    Ok(name)
}

fn ls(args: &LsArgs) -> CliResult {
    let view: AgentsView = args.node.get("/v1/agents")?;
    if args.json {
        for agent in &view.agents {
            print_json(agent);
        }
        return Ok(());
    }
    let mut table = Table::new(&["NAME", "NODE", "LANGUAGE", "STATE", "RESTARTS", "BRAIN"]);
    for agent in &view.agents {
        let node =
            if agent.local { format!("{} (this node)", short(&agent.node)) } else { short(&agent.node) };
        let state = match &agent.error {
            Some(error) => format!("{} ({error})", agent.state),
            None => agent.state.clone(),
        };
        table.row(vec![
            agent.name.clone(),
            node,
            agent.language.clone(),
            state,
            agent.restarts.to_string(),
            agent.brain.clone(),
        ]);
    }
    table.print();
    eprintln!("{} agents", view.agents.len());
    Ok(())
}

/// A peer id's last 8 characters (the table's width; `--json` has them whole).
fn short(peer: &str) -> String {
    let tail: String = peer.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
    if tail.len() < peer.len() { format!("…{tail}") } else { tail }
}

fn send(args: &SendArgs) -> CliResult {
    let name = segment(&args.name)?;
    let answer: serde_json::Value =
        args.node.post(&format!("/v1/agents/{name}/messages"), &serde_json::json!({ "text": args.text }))?;
    if args.json {
        print_json(&answer);
    } else {
        eprintln!("sent to {name}");
    }
    Ok(())
}

fn logs(args: &LogsArgs) -> CliResult {
    let name = segment(&args.name)?;
    let path = format!("/v1/agents/{name}/logs?lines={}&follow={}", args.lines, args.follow);
    let json = args.json;
    args.node.get_lines(&path, &mut |value| {
        if json {
            print_json(&value);
            return Ok(());
        }
        let line: AgentLogLine =
            serde_json::from_value(value).map_err(|e| CliError::failed(anyhow::Error::from(e)))?;
        println!("{} {:5} {:5} {}", line.ts_ms, line.level, line.source, line.message);
        Ok(())
    })
}

fn memory(args: &MemoryArgs) -> CliResult {
    let name = segment(&args.name)?;
    let path = match &args.key {
        Some(key) => format!("/v1/agents/{name}/memory?key={}", urlencode(key)),
        None => format!("/v1/agents/{name}/memory"),
    };
    let view: AgentMemoryView = args.node.get(&path)?;
    if args.json {
        for entry in &view.entries {
            print_json(entry);
        }
        return Ok(());
    }
    if let Some(key) = &args.key {
        let value = view.entries.iter().find(|e| &e.key == key).map(|e| e.value.clone()).unwrap_or_default();
        println!("{value}");
        return Ok(());
    }
    let mut table = Table::new(&["KEY", "VALUE"]);
    for entry in &view.entries {
        table.row(vec![entry.key.clone(), entry.value.clone()]);
    }
    table.print();
    Ok(())
}

/// Percent-encodes a query value.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
