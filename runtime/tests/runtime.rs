//! The capsule runtime with real guest components built from `capsules/` (run
//! `bash capsules/build.sh` first; `tests/run.sh` does).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use murmur_runtime::ports::Ports;
use murmur_runtime::{CapsuleManifest, RunError, Runtime, RuntimeOptions, ToolInput};
use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform};

fn wasm(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capsules/target/wasm32-wasip2/release")
        .join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} is missing: run `bash capsules/build.sh`", path.display());
    path
}

struct Node {
    dir: tempfile::TempDir,
    runtime: Runtime,
}

impl Node {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ArtifactStore::open(&dir.path().join("store")).unwrap());
        let runtime = Runtime::new(
            RuntimeOptions::new(dir.path().to_path_buf(), true),
            store,
            Ports::standalone().unwrap(),
        )
        .unwrap();
        Self { dir, runtime }
    }

    fn install(&self, manifest: &str) -> anyhow::Result<()> {
        let manifest = CapsuleManifest::parse(manifest, Path::new("/"), self.dir.path())?;
        self.runtime.install(manifest).map(drop)
    }

    fn tool(&self, name: &str, wasm_name: &str, extra: &str) {
        self.install(&format!(
            "name = \"{name}\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"{}\"\n{extra}",
            wasm(wasm_name).display()
        ))
        .unwrap();
    }
}

fn input(text: &str) -> ToolInput {
    ToolInput { data: Some(text.into()), log_path: None }
}

#[tokio::test]
async fn echo_runs_and_its_metadata_is_recorded() {
    let node = Node::new();
    node.tool("echo", "echo", "");
    let run = node.runtime.run_tool("echo", input("hello")).await.unwrap();
    assert_eq!((run.result.status.as_str(), run.result.data.as_deref()), ("passed", Some("hello")));
    assert_eq!(serde_json::to_value(&run.calls[0]).unwrap()["state_effect"], "read");
    let hosted = node.runtime.hosted();
    assert_eq!(hosted[0].name, "echo");
    assert_eq!(hosted[0].digest, Some(murmur_protocol::Digest::of(&std::fs::read(wasm("echo")).unwrap())));
}

#[tokio::test]
async fn wordcount_counts_with_host_tokens_and_declares_a_scoped_resource() {
    let node = Node::new();
    node.tool("wordcount", "wordcount", "");
    let run = node.runtime.run_tool("wordcount", input("one two three\nfour")).await.unwrap();
    let data: serde_json::Value = serde_json::from_str(run.result.data.as_deref().unwrap()).unwrap();
    assert_eq!((data["words"].as_u64(), data["lines"].as_u64()), (Some(4), Some(2)));
    assert!(data["tokens"].as_u64().unwrap() >= 4, "counted by the host's murmur:text/chunks");
    let call = serde_json::to_value(&run.calls[0]).unwrap();
    assert_eq!(call["state_effect"], "read");
    assert!(call["resource_id"].as_str().unwrap().starts_with("text:fnv64:"));
    assert!(call.get("resource_id_source").is_none(), "the record holds only what the tool declared");
}

#[tokio::test]
async fn shell_runs_allowed_binaries_and_refuses_others_before_spawning() {
    let node = Node::new();
    node.tool("probe", "shell_probe", "[capabilities]\nshell = { allow = [\"sh\", \"/usr/bin/env\"] }\n");
    // A non-zero exit is data.
    let run = node.runtime.run_tool("probe", input("sh -c exit_7_now\nPATH=/usr/bin:/bin")).await.unwrap();
    assert_eq!(run.result.status, "failed");
    let run = node.runtime.run_tool("probe", input("sh -c echo_hi")).await.unwrap();
    assert_eq!(run.result.status, "failed", "sh -c echo_hi is 'command not found' (127), still data");
    // Exactly 16 KiB is whole; one byte more is cut, with the full output on disk.
    for (len, truncated) in [(16 * 1024, false), (16 * 1024 + 1, true)] {
        let script = format!(
            "sh -c head${{IFS}}-c${{IFS}}{len}${{IFS}}/dev/zero|tr${{IFS}}'\\0'${{IFS}}x\nPATH=/usr/bin:/bin"
        );
        let run = node.runtime.run_tool("probe", input(&script)).await.unwrap();
        assert_eq!(run.result.status, "passed", "{:?}", run.result);
        assert_eq!(
            (run.result.truncated, run.result.data.as_ref().unwrap().len()),
            (truncated, 16 * 1024),
            "len {len}"
        );
        assert_eq!(run.result.data_path.is_some(), truncated);
    }
    // Not allowed: refused before anything runs (the file is never created).
    let marker = node.dir.path().join("spawned");
    let run = node.runtime.run_tool("probe", input(&format!("touch {}", marker.display()))).await.unwrap();
    assert_eq!(run.result.status, "error");
    assert_eq!(run.result.summary.as_deref(), Some("shell policy: 'touch' not in capabilities.shell.allow"));
    assert!(!marker.exists());
}

/// A JSON-RPC peer that records what it receives (the body, with its `traceparent` header
/// as `_traceparent`) and answers with a submitted task, or with an error when `refuse`.
async fn peer_answering(refuse: bool) -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    use axum::routing::post;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/",
        post(move |headers: axum::http::HeaderMap, axum::Json(mut body): axum::Json<serde_json::Value>| {
            let log = log.clone();
            async move {
                let id = body["id"].clone();
                let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
                body["_traceparent"] = serde_json::json!(traceparent);
                log.lock().unwrap().push(body);
                axum::Json(if refuse {
                    serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": {"code": -32001, "message": "not here"} })
                } else {
                    serde_json::json!({
                        "jsonrpc": "2.0", "id": id,
                        "result": {"kind": "task", "id": "task-1", "contextId": "pipeline", "status": {"state": "submitted"}}
                    })
                })
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("127.0.0.1:{}", addr.port()), seen)
}

async fn peer() -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    peer_answering(false).await
}

fn pipeline_manifest(tools: &str, network: &str, env: &str) -> String {
    format!(
        "name = \"pipeline\"\nversion = \"0.1.0\"\nkind = \"capsule\"\nartifact = \"{}\"\n\
         [capabilities]\ntools = [{tools}]\nnetwork = {{ allow = [{network}] }}\n[wasi]\nenv = {{ {env} }}\n",
        wasm("pipeline").display()
    )
}

#[tokio::test]
async fn the_pipeline_invokes_a_tool_and_sends_to_an_allowed_peer() {
    let node = Node::new();
    node.tool("wordcount", "wordcount", "");
    let (addr, seen) = peer().await;
    let env = format!("PIPELINE_PEER = \"{addr}\", PIPELINE_TEXT = \"a b c\"");
    node.install(&pipeline_manifest("\"wordcount\"", &format!("\"{addr}\""), &env)).unwrap();
    let run = node.runtime.run_capsule("pipeline").await.unwrap();
    assert!(run.stdout.contains("sent to") && run.stdout.contains("is submitted"), "{}", run.stdout);
    let received = seen.lock().unwrap().clone();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["method"], "message/send");
    let text = received[0]["params"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"words\":3"), "{text}");
    assert_eq!(run.calls[0].tool, "wordcount", "the nested tool call is recorded");
    // No OpenTelemetry outside a node: the specification injects no `traceparent` then.
    assert_eq!(received[0]["_traceparent"], serde_json::Value::Null, "{}", received[0]);
}

#[tokio::test]
async fn a_peers_refusal_is_the_state_rejected_not_an_error() {
    let node = Node::new();
    node.tool("wordcount", "wordcount", "");
    let (addr, seen) = peer_answering(true).await;
    let env = format!("PIPELINE_PEER = \"{addr}\", PIPELINE_TEXT = \"a b\"");
    node.install(&pipeline_manifest("\"wordcount\"", &format!("\"{addr}\""), &env)).unwrap();
    // The pipeline panics on an `Err`: it runs to the end only if the refusal is data.
    let run = node.runtime.run_capsule("pipeline").await.unwrap();
    assert!(run.stdout.contains(&format!("sent to {addr}: task  is rejected")), "{}", run.stdout);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_send_outside_the_allowlist_is_refused_before_any_connection() {
    let node = Node::new();
    node.tool("wordcount", "wordcount", "");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
    let env = format!("PIPELINE_PEER = \"{target}\"");
    node.install(&pipeline_manifest("\"wordcount\"", "\"localhost:1\"", &env)).unwrap();
    let err = node.runtime.run_capsule("pipeline").await.unwrap_err();
    let expected = format!("network policy: '{target}' not in capabilities.network.allow");
    assert!(err.to_string().contains(&expected), "{err}");
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock, "no connection was made");
}

#[tokio::test]
async fn a_capsule_cannot_invoke_a_tool_outside_its_allowlist() {
    let node = Node::new();
    node.tool("wordcount", "wordcount", "");
    node.install(&pipeline_manifest("\"echo\"", "", "")).unwrap();
    let err = node.runtime.run_capsule("pipeline").await.unwrap_err();
    assert!(err.to_string().contains("tool policy: 'wordcount' not in capabilities.tools"), "{err}");
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_at_its_deadline_and_the_node_stays_healthy() {
    let node = Node::new();
    node.tool("spin", "misbehaving_spin", "[limits]\ndeadline_ms = 300\n");
    node.tool("echo", "echo", "");
    let started = Instant::now();
    let err = node.runtime.run_tool("spin", input("")).await.unwrap_err();
    assert!(matches!(err, RunError::Deadline { deadline_ms: 300, .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let run = node.runtime.run_tool("echo", input("still here")).await.unwrap();
    assert_eq!(run.result.data.as_deref(), Some("still here"));
}

#[tokio::test]
async fn a_memory_bomb_is_refused_at_its_limit() {
    let node = Node::new();
    node.tool("bomb", "misbehaving_membomb", "[limits]\nmemory_mb = 16\n");
    let err = node.runtime.run_tool("bomb", input("")).await.unwrap_err();
    assert!(matches!(err, RunError::Limit { .. }), "{err}");
    assert!(err.to_string().contains("memory limit of 16 MiB"), "{err}");
}

#[tokio::test]
async fn components_without_the_exact_versioned_export_do_not_load() {
    let node = Node::new();
    let err = node
        .install(&format!(
            "name = \"legacy\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"{}\"\n",
            wasm("misbehaving_unversioned").display()
        ))
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("does not export `murmur:tool/run@0.1.0`") && text.contains("`murmur:tool/run`"),
        "{text}"
    );
    assert!(text.contains("rebuild it against murmur:tool@0.1.0") && text.contains("mur install"), "{text}");
    let err = node
        .install(&format!(
            "name = \"echo\"\nversion = \"1\"\nkind = \"capsule\"\nartifact = \"{}\"\n",
            wasm("echo").display()
        ))
        .unwrap_err();
    assert!(format!("{err:#}").contains("does not export `murmur:capsule/run@0.1.0`"), "{err:#}");
}

fn stock(node: &Node, name: &str, wasm_name: &str) -> murmur_store::Stored {
    stock_version(node, name, "1.0.0", wasm_name, &format!("{name} from the store"))
}

fn stock_version(
    node: &Node,
    name: &str,
    version: &str,
    wasm_name: &str,
    description: &str,
) -> murmur_store::Stored {
    let meta = ArtifactMeta {
        name: name.into(),
        version: version.into(),
        kind: CapsuleKind::Tool,
        runtime: Platform::Wasm,
        description: description.into(),
        tags: vec!["text".into()],
        input_schema: None,
        output_schema: None,
    };
    node.runtime.store().add(&meta, &std::fs::read(wasm(wasm_name)).unwrap(), None).unwrap()
}

#[tokio::test]
async fn a_pulled_tool_is_listed_pinned_and_invokable_in_the_same_run() {
    let node = Node::new();
    let stored = stock(&node, "wordcount", "wordcount");
    node.install(&pipeline_manifest("\"wordcount\"", "", "PIPELINE_PULL = \"wordcount@1.0.0\"")).unwrap();
    let run = node.runtime.run_capsule("pipeline").await.unwrap();
    assert!(run.stdout.contains("pulled wordcount@1.0.0: wordcount from the store"), "{}", run.stdout);
    assert!(
        run.stdout.contains("installed: wordcount@1.0.0") && run.stdout.contains("\"words\":2"),
        "{}",
        run.stdout
    );
    let workdir = node.dir.path().join("work/pipeline");
    let lock = std::fs::read_to_string(workdir.join("murmur.lock")).unwrap();
    assert!(lock.contains(&stored.content.to_string()), "{lock}");
    assert!(workdir.join("tools/wordcount/wordcount.wasm").is_file());
}

#[tokio::test]
async fn a_pull_that_contradicts_the_lock_writes_nothing() {
    let node = Node::new();
    stock(&node, "wordcount", "wordcount");
    let workdir = node.dir.path().join("work/pipeline");
    std::fs::create_dir_all(&workdir).unwrap();
    let pinned = format!(
        "version = 1\n[[artifact]]\nname = \"wordcount\"\nversion = \"1.0.0\"\ndigest = \"{}\"\nmanifest = \"{}\"\n",
        murmur_protocol::Digest::of(b"other"),
        murmur_protocol::Digest::of(b"m")
    );
    std::fs::write(workdir.join("murmur.lock"), &pinned).unwrap();
    node.install(&pipeline_manifest("\"wordcount\"", "", "PIPELINE_PULL = \"wordcount@1.0.0\"")).unwrap();
    let err = node.runtime.run_capsule("pipeline").await.unwrap_err();
    assert!(err.to_string().contains("murmur.lock pins wordcount@1.0.0"), "{err}");
    assert_eq!(
        std::fs::read_to_string(workdir.join("murmur.lock")).unwrap(),
        pinned,
        "the lock is unchanged"
    );
    assert!(!workdir.join("tools/wordcount").exists(), "nothing was installed");
}

#[tokio::test]
async fn a_manifest_naming_an_artifact_loads_only_the_bytes_the_nodes_lock_pins() {
    let node = Node::new();
    let stored = stock(&node, "wordcount", "wordcount");
    let manifest =
        "name = \"wordcount\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"wordcount@1.0.0\"\n";
    let lock = |digest: murmur_protocol::Digest, manifest: murmur_protocol::Digest| {
        format!(
            "version = 1\n[[artifact]]\nname = \"wordcount\"\nversion = \"1.0.0\"\ndigest = \"{digest}\"\nmanifest = \"{manifest}\"\n"
        )
    };
    // `mur install` pinned other bytes under this name@version: the store's were replaced.
    let path = node.dir.path().join("murmur.lock");
    std::fs::write(&path, lock(murmur_protocol::Digest::of(b"other"), stored.manifest)).unwrap();
    let err = format!("{:#}", node.install(manifest).unwrap_err());
    assert!(err.contains("murmur.lock pins wordcount@1.0.0") && err.contains("was replaced"), "{err}");
    assert!(node.runtime.installed().is_empty(), "nothing was loaded");
    // The pinned bytes load.
    std::fs::write(&path, lock(stored.content, stored.manifest)).unwrap();
    node.install(manifest).unwrap();
}

#[tokio::test]
async fn a_pulled_tool_serves_its_capsule_alone_and_describe_names_the_pulled_version() {
    let node = Node::new();
    node.tool("wordcount", "wordcount", "");
    // The capsule pulls an older `wordcount` that is really an echo; the store also has a
    // higher version.
    stock_version(&node, "wordcount", "1.0.0", "echo", "wordcount 1, an echo");
    stock_version(&node, "wordcount", "2.0.0", "wordcount", "wordcount 2");
    let env = "PIPELINE_PULL = \"wordcount@1.0.0\", PIPELINE_TEXT = \"a b c\"";
    node.install(&pipeline_manifest("\"wordcount\"", "", env)).unwrap();
    let run = node.runtime.run_capsule("pipeline").await.unwrap();
    assert!(run.stdout.contains("pulled wordcount@1.0.0: wordcount 1, an echo"), "{}", run.stdout);
    assert!(run.stdout.contains("wordcount: a b c"), "the capsule calls what it pulled: {}", run.stdout);
    // The node's own `wordcount` is untouched, for everyone else.
    let own = node.runtime.run_tool("wordcount", input("x y")).await.unwrap();
    assert!(own.result.data.unwrap().contains("\"words\":2"));
    assert_eq!(node.runtime.installed().len(), 2, "wordcount and pipeline");
}

#[tokio::test]
async fn the_lock_pins_an_artifact_by_name_whatever_version_is_pulled() {
    let node = Node::new();
    let one = stock_version(&node, "wordcount", "1.0.0", "wordcount", "wordcount 1");
    stock_version(&node, "wordcount", "2.0.0", "echo", "wordcount 2");
    let workdir = node.dir.path().join("work/pipeline");
    std::fs::create_dir_all(&workdir).unwrap();
    let pinned = format!(
        "version = 1\n[[artifact]]\nname = \"wordcount\"\nversion = \"1.0.0\"\ndigest = \"{}\"\nmanifest = \"{}\"\n",
        one.content, one.manifest
    );
    std::fs::write(workdir.join("murmur.lock"), &pinned).unwrap();
    node.install(&pipeline_manifest("\"wordcount\"", "", "PIPELINE_PULL = \"wordcount@2.0.0\"")).unwrap();
    let err = node.runtime.run_capsule("pipeline").await.unwrap_err().to_string();
    assert!(
        err.contains("murmur.lock pins wordcount@1.0.0") && err.contains("nothing was installed"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(workdir.join("murmur.lock")).unwrap(),
        pinned,
        "the lock is unchanged"
    );
    assert!(!workdir.join("tools/wordcount").exists(), "nothing was installed");
}

#[tokio::test]
async fn a_pull_counts_toward_the_nodes_install_limit() {
    let node = Node::new();
    stock(&node, "wordcount", "wordcount");
    let limit = murmur_config::limits::INSTALLED_MAX;
    for i in 0..limit - 1 {
        node.tool(&format!("t{i}"), "echo", "");
    }
    node.install(&pipeline_manifest("\"wordcount\"", "", "PIPELINE_PULL = \"wordcount@1.0.0\"")).unwrap();
    let err = node.runtime.run_capsule("pipeline").await.unwrap_err().to_string();
    assert!(err.contains(&format!("already runs {limit} capsules and tools")), "{err}");
    let workdir = node.dir.path().join("work/pipeline");
    assert!(
        !workdir.join("tools/wordcount").exists() && !workdir.join("murmur.lock").exists(),
        "nothing was written"
    );
}

#[tokio::test]
async fn removing_an_artifact_a_running_capsule_uses_is_refused() {
    let node = Node::new();
    let stored = stock(&node, "wordcount", "wordcount");
    node.install(&format!(
        "name = \"wordcount\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"{}\"\n",
        stored.content
    ))
    .unwrap();
    node.install(&pipeline_manifest("\"wordcount\"", "", "PIPELINE_REMOVE = \"wordcount\"")).unwrap();
    let run = node.runtime.run_capsule("pipeline").await.unwrap();
    assert!(
        run.stdout.contains(
            "remove wordcount refused: artifact 'wordcount' is in use by running capsule(s): wordcount"
        ),
        "{}",
        run.stdout
    );
    assert!(node.runtime.store().find("wordcount", None).unwrap().is_some());
}

#[tokio::test]
async fn wasi_http_is_linked_for_drivers_only() {
    let node = Node::new();
    let err = node
        .install(&format!(
            "name = \"sneaky\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"{}\"\n",
            wasm("openai_driver").display()
        ))
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("wasi:http") && text.contains("drivers only"), "{text}");
    node.install(&format!(
        "name = \"driver\"\nversion = \"1\"\nkind = \"driver\"\nartifact = \"{}\"\n",
        wasm("openai_driver").display()
    ))
    .unwrap();
}
