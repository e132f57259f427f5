//! The agent loop's host-side cost per turn: everything but the provider's own time.
//!
//! A task runs through the real runner and runtime with the scripted driver
//! (`capsules/fixtures/scripted-driver`, a real component that answers at once, so the
//! provider's time is zero): each turn is a driver instantiate and call, the request and
//! reply encoded, decoded and counted with tiktoken, trace records appended, and (with
//! hooks) every sync hook dispatched. A task of 1 + N turns (N turns that call a tool the
//! agent does not offer, answered by the loop itself, then the answer) is timed against a
//! one-turn task in the same run; a turn costs (T(1 + N) − median T(1)) / N. The same with
//! two sync hooks (`capsules/fixtures/arms-hook` twice, answering `none`), which then run
//! at `on-inference` and `on-tool-call` of every turn. Also: tiktoken's counting rate.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use murmur_agent::runner::{AgentRunner, TaskLink, Tiktoken};
use murmur_agent::session::{TaskEnd, TaskStart, Tokenizer};
use murmur_runtime::ports::{PortFuture, Ports, TaskPort};
use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions};
use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform};
use serde::Serialize;
use serde_json::json;

use crate::{Figure, summarize};

/// Turns after the first in the long task.
const EXTRA_TURNS: usize = 16;

#[derive(Debug, Serialize)]
struct Report {
    per_turn: Vec<Figure>,
    one_turn_task: Vec<Figure>,
    tokens_per_s: f64,
    tokenizer_mb_per_s: f64,
}

struct NoInput;

impl TaskPort for NoInput {
    fn request_input(&self, _: String, _: Duration) -> PortFuture<'_, Result<String, String>> {
        Box::pin(async { Err("no input in a benchmark".to_owned()) })
    }

    fn traceparent(&self) -> Option<String> {
        None
    }
}

fn stock(runtime: &Runtime, name: &str, guest: &str, kind: CapsuleKind) -> anyhow::Result<()> {
    let meta = ArtifactMeta {
        name: name.into(),
        version: "0.1.0".into(),
        kind,
        runtime: Platform::Wasm,
        description: String::new(),
        tags: vec![],
        input_schema: None,
        output_schema: None,
    };
    runtime.store().add(&meta, &std::fs::read(murmur_tests::guest(guest))?, None)?;
    Ok(())
}

fn agent(
    runtime: &Runtime,
    dir: &Path,
    name: &str,
    turns: usize,
    hooks: bool,
) -> anyhow::Result<Arc<murmur_runtime::Agent>> {
    let call = json!({ "finish_reason": "tool_calls", "tool_calls": [{ "id": "c", "name": "not-offered", "arguments": "{}" }] });
    let mut script = vec![call; turns - 1];
    script.push(json!({ "text": "done", "finish_reason": "stop" }));
    let script = serde_json::Value::from(script).to_string();
    let hooks = if hooks {
        "[[hooks]]\nartifact = \"hook-a@0.1.0\"\n[[hooks]]\nartifact = \"hook-b@0.1.0\"\n"
    } else {
        ""
    };
    let manifest = format!(
        "name = \"{name}\"\nversion = \"0.1.0\"\nkind = \"agent\"\n[inference]\nmodel = \"gpt-4o-mini\"\ndriver = {{ artifact = \"scripted-driver@0.1.0\" }}\nmax_turns = {}\n{hooks}[wasi]\nenv = {{ SCRIPT = '{script}' }}\n",
        turns + 1
    );
    runtime.install_agent(CapsuleManifest::parse(&manifest, Path::new("/"), dir)?)
}

async fn time_task(
    runner: &AgentRunner,
    agent: &Arc<murmur_runtime::Agent>,
    i: usize,
) -> anyhow::Result<f64> {
    let start = TaskStart {
        task_id: format!("t{i}"),
        context_id: format!("c{i}"),
        source: "bench".into(),
        text: "go".into(),
    };
    let link = TaskLink { start, port: Arc::new(NoInput) };
    let began = Instant::now();
    let end = runner.run_task(agent.clone(), link).await;
    let micros = began.elapsed().as_secs_f64() * 1e6;
    anyhow::ensure!(end == TaskEnd::Completed("done".into()), "the benchmark task ended {end:?}");
    Ok(micros)
}

pub fn run(samples: usize, out: &Path) -> anyhow::Result<()> {
    let threads = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = threads.block_on(async {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(ArtifactStore::open(&dir.path().join("store"))?);
        let options = RuntimeOptions::new(dir.path().to_path_buf(), true);
        let runtime = Runtime::new(options, store, Ports::standalone()?)?;
        stock(&runtime, "scripted-driver", "scripted_driver", CapsuleKind::Driver)?;
        stock(&runtime, "hook-a", "arms_hook", CapsuleKind::Hook)?;
        stock(&runtime, "hook-b", "arms_hook", CapsuleKind::Hook)?;
        let runner = AgentRunner::new(runtime.clone());
        let mut per_turn = Vec::new();
        let mut one_turn_task = Vec::new();
        for (label, hooks) in [("no hooks", false), ("two sync hooks", true)] {
            let slug = if hooks { "hooked" } else { "plain" };
            let short = agent(&runtime, dir.path(), &format!("{slug}-one"), 1, hooks)?;
            let long = agent(&runtime, dir.path(), &format!("{slug}-long"), 1 + EXTRA_TURNS, hooks)?;
            for i in 0..samples / 10 {
                time_task(&runner, &short, i).await?;
                time_task(&runner, &long, i).await?;
            }
            // Interleaved, so drift hits both alike.
            let (mut ones, mut longs) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
            for i in 0..samples {
                ones.push(time_task(&runner, &short, i).await?);
                longs.push(time_task(&runner, &long, i).await?);
            }
            let mut sorted = ones.clone();
            sorted.sort_by(f64::total_cmp);
            let base = crate::percentile(&sorted, 50.0);
            let turns: Vec<f64> = longs.iter().map(|t| (t - base) / EXTRA_TURNS as f64).collect();
            per_turn.push(summarize(&format!("one turn, {label}"), turns));
            one_turn_task.push(summarize(&format!("one-turn task (session start to end), {label}"), ones));
        }
        // tiktoken on a turn-sized request: 64 KiB of JSON conversation.
        let text = json!({ "messages": vec![json!({ "role": "user", "content": "How many words are in notes.txt? Count them, then report the number and the ten most frequent words." }); 400] }).to_string();
        let tokens = Tiktoken::for_model("gpt-4o-mini");
        let began = Instant::now();
        let mut counted = 0;
        let mut rounds = 0u32;
        while began.elapsed() < Duration::from_secs(2) {
            counted += tokens.count(&text);
            rounds += 1;
        }
        let seconds = began.elapsed().as_secs_f64();
        anyhow::Ok(Report {
            per_turn,
            one_turn_task,
            tokens_per_s: counted as f64 / seconds,
            tokenizer_mb_per_s: f64::from(rounds) * text.len() as f64 / seconds / 1e6,
        })
    })?;
    println!("{:<44} {:>8} {:>10} {:>10}", "agent loop, host side", "samples", "p50 µs", "p99 µs");
    for figure in report.per_turn.iter().chain(&report.one_turn_task) {
        println!("{:<44} {:>8} {:>10.1} {:>10.1}", figure.name, figure.samples, figure.p50_us, figure.p99_us);
    }
    println!(
        "tiktoken (o200k, gpt-4o-mini): {:.0} tokens/s, {:.1} MB/s",
        report.tokens_per_s, report.tokenizer_mb_per_s
    );
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", out.display());
    Ok(())
}
