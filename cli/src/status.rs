//! `mur status`: one screen of a node — itself, its peers, the mesh's directory, what it
//! runs, its tasks and its pulls.

use clap::Args;

use super::client::NodeArgs;
use murmur_api::exit::CliResult;
use murmur_api::output::print_json;
use murmur_api::views::StatusView;

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print the API's JSON document (`GET /v1/status`) instead.
    #[arg(long)]
    json: bool,
}

pub fn run(args: StatusArgs) -> CliResult {
    let view: StatusView = args.node.get("/v1/status")?;
    if args.json {
        print_json(&view);
        return Ok(());
    }
    print!("{}", render(&view));
    Ok(())
}

fn render(s: &StatusView) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let uptime = s.uptime_secs;
    let _ = writeln!(out, "node      {}", s.peer_id);
    let _ = writeln!(
        out,
        "          murnode {}, up {}h {:02}m {:02}s, api {}",
        s.version,
        uptime / 3600,
        uptime / 60 % 60,
        uptime % 60,
        s.api
    );
    for addr in &s.listen_addrs {
        let _ = writeln!(out, "          {addr}");
    }
    let held = if s.peers_held_off > 0 { format!(", {} held off", s.peers_held_off) } else { String::new() };
    let _ = writeln!(
        out,
        "peers     {} connected, {} known from adverts{held}",
        s.peers_connected, s.peers_known
    );
    let _ = writeln!(out, "mesh      {} nodes, {} capsule names", s.directory_nodes, s.directory_capsules);
    let installed = if s.installed.is_empty() { "none".to_owned() } else { s.installed.join(", ") };
    let _ = writeln!(out, "runs      {installed}");
    let _ = writeln!(
        out,
        "agents    {} of {} running; MCP servers {} of {} up",
        s.agents_running, s.agents, s.mcp_up, s.mcp
    );
    let tasks: Vec<String> = s.tasks.iter().map(|(state, n)| format!("{n} {state}")).collect();
    let tasks = if tasks.is_empty() { "none".to_owned() } else { tasks.join(", ") };
    let _ = writeln!(out, "tasks     {tasks}");
    let pulls = if s.pulls.is_empty() { "none".to_owned() } else { s.pulls.join(", ") };
    let _ = writeln!(out, "pulls     {pulls}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_screen_names_each_part() {
        let view = StatusView {
            peer_id: "12D3KooWme".into(),
            version: "0.1.0 (git abc)".into(),
            uptime_secs: 3725,
            api: "http://127.0.0.1:7420".into(),
            peers_connected: 2,
            installed: vec!["echo@1.0.0 (tool)".into()],
            tasks: [("completed".to_owned(), 3)].into(),
            ..StatusView::default()
        };
        let text = render(&view);
        assert!(text.contains("up 1h 02m 05s"), "{text}");
        assert!(text.contains("2 connected"), "{text}");
        assert!(text.contains("runs      echo@1.0.0 (tool)"), "{text}");
        assert!(text.contains("tasks     3 completed"), "{text}");
        assert!(text.contains("pulls     none"), "{text}");
    }
}
