//! `mur trace FILE|TASK_ID`: an agent session's `trace.jsonl`, summarised — turns, tokens,
//! tool and shell calls, time — with the reads the agent did not need (redundant-call
//! detection). A file is read directly; a task id is asked of the node that owns the task.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use murmur_api::exit::{CliError, CliResult, UsageContext};
use murmur_api::output::{Table, print_json};
use murmur_api::session_trace::{self, Summary};
use murmur_api::views::TaskTraceView;
use murmur_protocol::task::TaskId;

use super::client::NodeArgs;
use murmur_config::limits::TRACE_FILE_BYTES_MAX;

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// A session's trace file (`<workdir>/sessions/<session-id>/trace.jsonl` on the node),
    /// or the id of an agent task, read from the node that owns it (`--node`).
    target: String,
    #[command(flatten)]
    node: NodeArgs,
    /// One JSON object per session instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: TraceArgs) -> CliResult {
    let file = PathBuf::from(&args.target);
    let text = if file.exists() || args.target.parse::<TaskId>().is_err() {
        read_file(&file)?
    } else {
        let view: TaskTraceView = args.node.get(&format!("/v1/tasks/{}/trace", args.target))?;
        view.trace
    };
    let records =
        session_trace::parse(&text).usage_context(format!("{} is not a session trace", args.target))?;
    let sessions = session_trace::summarize(&records);
    if args.json {
        for summary in &sessions {
            print_json(summary);
        }
        return Ok(());
    }
    for summary in &sessions {
        print_summary(summary);
    }
    Ok(())
}

fn read_file(file: &std::path::Path) -> CliResult<String> {
    let path = file.display();
    let len = std::fs::metadata(file)
        .usage_context(format!(
            "cannot read the trace {path} (give a trace file, or the id of an agent task)"
        ))?
        .len();
    if len > TRACE_FILE_BYTES_MAX {
        return Err(CliError::usage(anyhow::anyhow!(
            "{path} is {len} bytes, more than the {TRACE_FILE_BYTES_MAX} a session trace may be"
        )));
    }
    std::fs::read_to_string(file)
        .with_context(|| format!("cannot read {path} as UTF-8 text"))
        .usage_context("a session trace is JSON lines")
}

fn print_summary(s: &Summary) {
    let mut table = Table::new(&[
        "SESSION",
        "CAPSULE",
        "MODEL",
        "TASKS",
        "TURNS",
        "TOKENS IN/OUT",
        "TOOLS",
        "SHELL",
        "TIME",
    ]);
    table.row(vec![
        s.session_id.clone(),
        s.capsule.clone(),
        s.model.clone(),
        s.tasks.to_string(),
        s.turns.to_string(),
        format!("{}/{}", s.input_tokens, s.output_tokens),
        s.tool_calls.to_string(),
        s.shell_calls.to_string(),
        format!("{:.1}s", s.duration_ms as f64 / 1000.0),
    ]);
    table.print();
    if !s.ended {
        println!("(no session_end record: the session is still running, or its node stopped)");
    }
    if s.compactions > 0 || s.hook_dispatch_errors > 0 {
        println!("compactions: {}, hook dispatch errors: {}", s.compactions, s.hook_dispatch_errors);
    }
    if s.redundant.is_empty() {
        println!("no redundant reads");
        return;
    }
    println!("redundant reads ({}):", s.redundant.len());
    let mut table = Table::new(&["LINE", "TURN", "TOOL", "RESOURCE", "FROM", "FIRST READ"]);
    for r in &s.redundant {
        table.row(vec![
            r.line.to_string(),
            r.turn.to_string(),
            r.tool.clone(),
            r.resource_id.clone(),
            r.resource_from.clone(),
            format!("line {}", r.first_line),
        ]);
    }
    table.print();
}
