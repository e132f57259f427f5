//! Model figures: a brain serving `bench-model` (it streams N one-word deltas, N being the
//! request's last message), read three ways in one run — in process from the brain host
//! (the brain's own delta rate: no HTTP, no network), through node B's own `/v1` (HTTP
//! and SSE), and through node A's `/v1` with B's brain one `/murmur/model/1` hop away —
//! for time to first chunk and chunks per second; then many concurrent streams on one
//! node.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use murmur_brain::{AgentConfig, Brains, NoMesh, Source};
use murmur_protocol::model::{ChatMessage, ChatRequest};
use murmur_runtime::ports::Ports;
use murmur_runtime::{Runtime, RuntimeOptions};
use murmur_store::ArtifactStore;
use murmur_tests::{TestNode, wait_for};
use serde::Serialize;
use serde_json::json;

use crate::{Figure, summarize};

/// The brain: serves `bench-model`, streaming as many deltas as the last message says,
/// waiting a millisecond whenever its session's buffer is full (the client's pace).
const BRAIN: &str = r#"
subscribe_endpoint("bench-model");
loop {
    let e = ();
    try { e = recv(); } catch { continue; }
    if e.kind != "endpoint_message" { continue; }
    let m = e.value.messages;
    let n = parse_int(m[m.len() - 1].content);
    let s = e.value.session;
    let i = 0;
    let open = true;
    while open && i < n {
        try { stream_endpoint(s, #{ content: "x" }); i += 1; }
        catch (err) { if `${err}`.contains("buffered") { sleep_for(1); } else { open = false; } }
    }
    if open { try { stream_endpoint(s, #{ finish_reason: "stop" }); } catch {} }
}
"#;

#[derive(Debug, Serialize)]
struct Rate {
    name: String,
    runs: usize,
    chunks: u64,
    median_chunks_per_s: f64,
}

#[derive(Debug, Serialize)]
struct Concurrent {
    name: String,
    streams: usize,
    chunks_each: u64,
    completed: usize,
    failed: usize,
    wall_s: f64,
    chunks_per_s: f64,
    stream_p50_ms: f64,
    stream_p99_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    first_chunk: Vec<Figure>,
    /// p50 of the mesh hop's first chunk minus p50 of the local endpoint's, in µs.
    mesh_hop_adds_p50_us: f64,
    rates: Vec<Rate>,
    concurrent: Vec<Concurrent>,
}

fn request(n: u64) -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage {
            role: "user".into(),
            content: Some(n.to_string()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The brain host in process, serving `bench-model`.
async fn host(dir: &Path) -> anyhow::Result<Brains> {
    let brain = dir.join("bench.rhai");
    std::fs::write(&brain, BRAIN)?;
    let store = Arc::new(ArtifactStore::open(&dir.join("store"))?);
    let runtime =
        Runtime::new(RuntimeOptions::new(dir.to_path_buf(), true), store.clone(), Ports::standalone()?)?;
    let mut config = AgentConfig::new("bench", Source::File(brain));
    config.inbox_max = 4096;
    let brains = Brains::start(
        vec![config],
        runtime,
        store,
        &dir.join("brains.redb"),
        &dir.join("agents"),
        Arc::new(NoMesh),
        Arc::new(murmur_brain::NoMcp),
    )?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !brains.serves("bench-model") {
        anyhow::ensure!(Instant::now() < deadline, "the bench brain did not subscribe");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(brains)
}

/// Reads one session in process: time to its first delta and deltas read.
async fn in_process(brains: &Brains, n: u64) -> anyhow::Result<(Duration, u64, Duration)> {
    let started = Instant::now();
    let mut session = brains.open_session("bench-model", request(n)).map_err(anyhow::Error::msg)?;
    let mut first = None;
    let mut count = 0;
    while let Ok(delta) = session.next().await {
        first.get_or_insert_with(|| started.elapsed());
        if delta.content.is_some() {
            count += 1;
        }
    }
    Ok((first.unwrap_or_default(), count, started.elapsed()))
}

/// Streams one completion over HTTP: time to the first content chunk, content chunks,
/// total time.
async fn over_http(client: &reqwest::Client, api: &str, n: u64) -> anyhow::Result<(Duration, u64, Duration)> {
    let body = json!({ "model": "bench-model", "stream": true, "messages": [{ "role": "user", "content": n.to_string() }] });
    let started = Instant::now();
    let mut response = client.post(format!("{api}/v1/chat/completions")).json(&body).send().await?;
    anyhow::ensure!(response.status().is_success(), "{}: {}", response.status(), response.text().await?);
    let mut first = None;
    let mut count = 0u64;
    let mut tail = Vec::new();
    let needle = b"\"content\":\"x\"";
    while let Some(bytes) = response.chunk().await? {
        // Count across chunk boundaries: keep the last few bytes of the previous chunk.
        let mut window = std::mem::take(&mut tail);
        window.extend_from_slice(&bytes);
        let found = window.windows(needle.len()).filter(|w| *w == needle).count() as u64;
        if found > 0 {
            first.get_or_insert_with(|| started.elapsed());
        }
        count += found;
        let keep = window.len().min(needle.len() - 1);
        tail = window[window.len() - keep..].to_vec();
    }
    Ok((first.unwrap_or_default(), count, started.elapsed()))
}

fn node(config: &str, bootstrap: Option<&TestNode>) -> anyhow::Result<(TestNode, tempfile::TempDir)> {
    let dir = murmur_tests::init_data_dir_with(config);
    let mut flags: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        flags.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let node = TestNode::start_in_env(dir.path(), &flags, &[("MURNODE_LOG", "warn")])?;
    Ok((node, dir))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(samples: usize, chunks: u64, streams: usize, out: &Path) -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    let brain = scratch.path().join("bench.rhai");
    std::fs::write(&brain, BRAIN)?;
    let b_config = format!(
        "[adverts]\nrefresh_secs = 1\nttl_secs = 30\n[[agents]]\nname = \"bench\"\nbrain = \"{}\"\ninbox = 4096\n",
        brain.display()
    );
    let (b, _b_dir) = node(&b_config, None)?;
    let (a, _a_dir) = node("[adverts]\nrefresh_secs = 1\nttl_secs = 30\n", Some(&b))?;
    wait_for(Duration::from_secs(60), "A to list bench-model", || {
        let models = a.get("/v1/models").ok()?;
        models["data"].as_array()?.iter().any(|m| m["id"] == "bench-model").then_some(())
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(async {
        let dir = tempfile::tempdir()?;
        let brains = host(dir.path()).await?;
        let client = reqwest::Client::builder().pool_max_idle_per_host(2048).build()?;
        let (a_api, b_api) = (a.api.clone(), b.api.clone());

        // Time to first chunk: one-delta replies, each way, interleaved per sample.
        for _ in 0..20 {
            in_process(&brains, 1).await?;
            over_http(&client, &b_api, 1).await?;
            over_http(&client, &a_api, 1).await?;
        }
        let (mut here, mut local, mut hop) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..samples {
            here.push(in_process(&brains, 1).await?.0.as_secs_f64() * 1e6);
            local.push(over_http(&client, &b_api, 1).await?.0.as_secs_f64() * 1e6);
            hop.push(over_http(&client, &a_api, 1).await?.0.as_secs_f64() * 1e6);
        }
        let first_chunk = vec![
            summarize("first delta, in process (the brain host alone; baseline)", here),
            summarize("first chunk, node B's own /v1 (HTTP + SSE)", local),
            summarize("first chunk, node A's /v1, brain on B (one /murmur/model/1 hop)", hop),
        ];
        let mesh_hop_adds_p50_us = first_chunk[2].p50_us - first_chunk[1].p50_us;

        // Chunks per second of one long reply, each way, three runs each.
        let mut rates = Vec::new();
        for (name, way) in [
            ("deltas/s, in process (the brain's own rate; baseline)", 0),
            ("chunks/s, node B's own /v1", 1),
            ("chunks/s, node A's /v1, brain on B", 2),
        ] {
            let mut per_s = Vec::new();
            for _ in 0..3 {
                let (_, count, total) = match way {
                    0 => in_process(&brains, chunks).await?,
                    1 => over_http(&client, &b_api, chunks).await?,
                    _ => over_http(&client, &a_api, chunks).await?,
                };
                anyhow::ensure!(count == chunks, "{name}: {count} of {chunks} chunks arrived");
                per_s.push(count as f64 / total.as_secs_f64());
            }
            rates.push(Rate { name: name.into(), runs: 3, chunks, median_chunks_per_s: median(per_s) });
        }

        // Many streams open at once on one node.
        let mut concurrent = Vec::new();
        for (name, api) in [
            ("concurrent streams, node B's own /v1", &b_api),
            ("concurrent streams, node A's /v1, brain on B", &a_api),
        ] {
            let each = 100;
            let started = Instant::now();
            let tasks: Vec<_> = (0..streams)
                .map(|_| {
                    let (client, api) = (client.clone(), api.clone());
                    tokio::spawn(async move { over_http(&client, &api, each).await })
                })
                .collect();
            let mut times = Vec::new();
            let mut failed = 0;
            for task in tasks {
                match task.await {
                    Ok(Ok((_, count, total))) if count == each => times.push(total.as_secs_f64() * 1e3),
                    _ => failed += 1,
                }
            }
            let wall_s = started.elapsed().as_secs_f64();
            let completed = times.len();
            times.sort_by(f64::total_cmp);
            let pct = |p: f64| {
                times
                    .get(((p / 100.0) * (times.len().max(1) - 1) as f64).round() as usize)
                    .copied()
                    .unwrap_or(0.0)
            };
            concurrent.push(Concurrent {
                name: name.into(),
                streams,
                chunks_each: each,
                completed,
                failed,
                wall_s,
                chunks_per_s: (completed as u64 * each) as f64 / wall_s,
                stream_p50_ms: pct(50.0),
                stream_p99_ms: pct(99.0),
            });
        }
        brains.shutdown(Duration::from_secs(5)).await;
        anyhow::Ok(Report { first_chunk, mesh_hop_adds_p50_us, rates, concurrent })
    })?;

    println!("{:<70} {:>8} {:>10} {:>10}", "time to first chunk", "samples", "p50 µs", "p99 µs");
    for f in &report.first_chunk {
        println!("{:<70} {:>8} {:>10.0} {:>10.0}", f.name, f.samples, f.p50_us, f.p99_us);
    }
    println!("mesh hop adds {:.0} µs to the first chunk (p50)\n", report.mesh_hop_adds_p50_us);
    println!("{:<70} {:>10} {:>14}", "one long reply", "chunks", "median /s");
    for r in &report.rates {
        println!("{:<70} {:>10} {:>14.0}", r.name, r.chunks, r.median_chunks_per_s);
    }
    println!(
        "\n{:<48} {:>7} {:>9} {:>6} {:>8} {:>11} {:>9} {:>9}",
        "concurrent", "streams", "completed", "failed", "wall s", "chunks/s", "p50 ms", "p99 ms"
    );
    for c in &report.concurrent {
        println!(
            "{:<48} {:>7} {:>9} {:>6} {:>8.2} {:>11.0} {:>9.1} {:>9.1}",
            c.name,
            c.streams,
            c.completed,
            c.failed,
            c.wall_s,
            c.chunks_per_s,
            c.stream_p50_ms,
            c.stream_p99_ms
        );
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    println!("\nwrote {}", out.display());
    Ok(())
}
