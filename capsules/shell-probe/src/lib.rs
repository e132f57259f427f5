//! `shell-probe`: runs the command its input names through murmur:shell/execute and
//! reports the result. Input: `BINARY ARG...` on the first line; each further line
//! `KEY=VALUE` is passed as an environment variable.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest", "../../wit/shell", "wit"],
    world: "murmur:shell-probe/shell-tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use murmur::shell::execute;

struct ShellProbe;

impl Guest for ShellProbe {
    fn run(input: ToolInput) -> ToolResult {
        let text = input.data.unwrap_or_default();
        let mut lines = text.lines();
        let mut words = lines.next().unwrap_or_default().split_whitespace().map(str::to_owned);
        let binary = words.next().unwrap_or_default();
        let args: Vec<String> = words.collect();
        let env: Vec<(String, String)> =
            lines.filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        match execute::run(&binary, &args, &env) {
            Ok(out) => ToolResult {
                status: if out.exit_code == 0 { Status::Passed } else { Status::Failed },
                summary: Some(format!("exit {}", out.exit_code)),
                data: Some(out.stdout),
                data_path: out.full_output_path,
                truncated: out.truncated,
                metadata: vec![
                    ("state_effect".into(), "mutate".into()),
                    ("exit_code".into(), out.exit_code.to_string()),
                    ("stderr".into(), out.stderr),
                ],
            },
            Err(err) => ToolResult {
                status: Status::Error,
                summary: Some(err),
                data: None,
                data_path: None,
                truncated: false,
                metadata: vec![],
            },
        }
    }
}

export!(ShellProbe);
