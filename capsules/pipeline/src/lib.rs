//! `pipeline`: a script capsule. It counts the words of `PIPELINE_TEXT` with the
//! `wordcount` tool (through murmur:tool-registry), then sends the result to the peer
//! `PIPELINE_PEER` with murmur:message/send. Both variables come from the manifest's
//! `[wasi] env`; nothing else is granted. It traps (and the run fails) on any error.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest", "../../wit/message", "../../wit/artifact-manager", "wit"],
    world: "murmur:pipeline/pipeline@0.1.0",
    generate_all,
});

use exports::murmur::capsule::run::Guest;
use murmur::message::send;
use murmur::tool::run::{Status, ToolInput};
use murmur::tool_registry::invoke;

struct Pipeline;

impl Guest for Pipeline {
    fn run() {
        let text = std::env::var("PIPELINE_TEXT").unwrap_or_else(|_| "hello mesh".into());
        let peer = std::env::var("PIPELINE_PEER").expect("PIPELINE_PEER is set by the manifest");
        let counted = invoke::invoke("wordcount", &ToolInput { data: Some(text), log_path: None })
            .unwrap_or_else(|err| panic!("wordcount: {err}"));
        assert!(matches!(counted.status, Status::Passed), "wordcount failed: {:?}", counted.summary);
        let message = send::Message {
            message_id: "pipeline-1".into(),
            context_id: Some("pipeline".into()),
            text: format!("wordcount says {}", counted.data.unwrap_or_default()),
        };
        let sent = send::send(&peer, &message).unwrap_or_else(|err| panic!("send: {err}"));
        println!("sent to {peer}: task {} is {}", sent.task_id, sent.state);
    }
}

export!(Pipeline);
