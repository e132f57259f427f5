//! `mur mcp`: the MCP servers configured on a node (`[[mcp]]`), whether each is up, and
//! why not.

use clap::Args;

use super::client::NodeArgs;
use murmur_api::exit::CliResult;
use murmur_api::output::{Table, print_json};
use murmur_api::views::McpServerView;

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print one JSON object per server instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: McpArgs) -> CliResult {
    let servers: Vec<McpServerView> = args.node.get("/v1/mcp")?;
    if args.json {
        for server in &servers {
            print_json(server);
        }
        return Ok(());
    }
    let mut table = Table::new(&["SERVER", "TRANSPORT", "STATE", "RESTARTS", "REQUESTS OK/FAILED", "DETAIL"]);
    for s in &servers {
        let detail = match (&s.protocol, &s.error, s.retry_in_secs) {
            (Some(protocol), _, _) => format!("MCP {protocol}"),
            (_, Some(error), Some(secs)) => format!("{error}; next attempt in {secs} s"),
            (_, Some(error), None) => error.clone(),
            _ => String::new(),
        };
        table.row(vec![
            s.name.clone(),
            s.transport.clone(),
            s.state.clone(),
            s.restarts.to_string(),
            format!("{}/{}", s.requests_ok, s.requests_failed),
            detail,
        ]);
    }
    table.print();
    eprintln!("{} MCP servers; a brain may use those its [[agents]] entry lists in `mcp`", servers.len());
    Ok(())
}
