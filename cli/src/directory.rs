//! `mur directory` (formerly `mur capsules`, still accepted): every capsule in the mesh
//! directory and the nodes that host it.

use clap::Args;

use super::client::NodeArgs;
use super::peers::human_age;
use murmur_api::exit::CliResult;
use murmur_api::output::{Table, print_json};
use murmur_api::views::CapsulesView;

#[derive(Debug, Args)]
pub struct DirectoryArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print the API's JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DirectoryArgs) -> CliResult {
    let view: CapsulesView = args.node.get("/v1/capsules")?;
    if args.json {
        print_json(&view);
        return Ok(());
    }
    let mut table = Table::new(&["CAPSULE", "VERSION", "NODE", "LOAD", "ADVERT AGE", "DIGEST"]);
    for capsule in &view.capsules {
        for provider in &capsule.providers {
            let node = if provider.local {
                format!("{} (this node)", provider.peer_id)
            } else {
                provider.peer_id.clone()
            };
            table.row(vec![
                capsule.name.clone(),
                provider.version.clone(),
                node,
                format!("{:.1}%", f64::from(provider.load) / 10.0),
                human_age(provider.advert_age_ms),
                provider.digest.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    table.print();
    eprintln!("{} capsules in the directory", view.capsules.len());
    Ok(())
}
