//! `pipeline`: a script capsule, configured by the environment its manifest grants
//! (`[wasi] env`; nothing else is visible to it):
//!
//! 1. `PIPELINE_PULL=name@version` (optional): pull that tool from the node's artifact store
//!    with murmur:artifact-manager, then print what `describe` and `list` say.
//! 2. `PIPELINE_REMOVE=name` (optional): ask the store to remove an artifact; print the answer.
//! 3. Count the words of `PIPELINE_TEXT` with the `wordcount` tool (murmur:tool-registry).
//! 4. `PIPELINE_PEER=url` (optional): send the count there with murmur:message/send.
//!
//! Any error traps (the run fails) with the host's message.

wit_bindgen::generate!({
    path: [
        "../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule",
        "../../wit/runtime-guest", "../../wit/message", "../../wit/artifact-manager", "wit",
    ],
    world: "murmur:pipeline/pipeline@0.1.0",
    generate_all,
});

use exports::murmur::capsule::run::Guest;
use murmur::artifact_manager::manage;
use murmur::message::send;
use murmur::tool::run::{Status, ToolInput};
use murmur::tool_registry::invoke;

struct Pipeline;

impl Guest for Pipeline {
    fn run() {
        if let Ok(spec) = std::env::var("PIPELINE_PULL") {
            let (name, version) = spec.split_once('@').expect("PIPELINE_PULL is name@version");
            let pulled = manage::pull(name, version).unwrap_or_else(|err| panic!("{err}"));
            let info = manage::describe(name).unwrap_or_else(|err| panic!("describe: {err}"));
            let listed: Vec<String> =
                manage::list().iter().map(|a| format!("{}@{}", a.name, a.version)).collect();
            println!("pulled {}@{}: {}", pulled.name, pulled.version, info.description);
            println!("installed: {}", listed.join(", "));
        }
        if let Ok(name) = std::env::var("PIPELINE_REMOVE") {
            match manage::remove(&name) {
                Ok(removed) => println!("remove {name}: {removed}"),
                Err(err) => println!("remove {name} refused: {err}"),
            }
        }
        let text = std::env::var("PIPELINE_TEXT").unwrap_or_else(|_| "hello mesh".into());
        let counted = invoke::invoke("wordcount", &ToolInput { data: Some(text), log_path: None })
            .unwrap_or_else(|err| panic!("wordcount: {err}"));
        assert!(matches!(counted.status, Status::Passed), "wordcount failed: {:?}", counted.summary);
        let count = counted.data.unwrap_or_default();
        println!("wordcount: {count}");
        if let Ok(peer) = std::env::var("PIPELINE_PEER") {
            let message = send::Message {
                message_id: "pipeline-1".into(),
                context_id: Some("pipeline".into()),
                text: format!("wordcount says {count}"),
            };
            let sent = send::send(&peer, &message).unwrap_or_else(|err| panic!("send: {err}"));
            println!("sent to {peer}: task {} is {}", sent.task_id, sent.state);
        }
    }
}

export!(Pipeline);
