//! `mur models`: every model an agent of the mesh serves on the OpenAI-compatible
//! endpoint, with the nodes that serve it.

use clap::Args;

use super::client::NodeArgs;
use murmur_api::exit::CliResult;
use murmur_api::output::{Table, print_json};
use murmur_api::views::ModelsView;

#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print the API's JSON document (OpenAI's list, with `served_by`) instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ModelsArgs) -> CliResult {
    let view: ModelsView = args.node.get("/v1/models")?;
    if args.json {
        print_json(&view);
        return Ok(());
    }
    let mut table = Table::new(&["MODEL", "HERE", "SERVED BY"]);
    for model in &view.data {
        table.row(vec![
            model.id.clone(),
            if model.local { "yes".into() } else { "-".into() },
            model.served_by.join(", "),
        ]);
    }
    table.print();
    eprintln!(
        "{} models; ask one with POST {}/v1/chat/completions (OpenAI's API)",
        view.data.len(),
        args.node.url.trim_end_matches('/')
    );
    Ok(())
}
