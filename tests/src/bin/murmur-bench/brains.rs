//! Brain figures: `send-agent` → `recv` round trips between two brains on one node (the
//! brain host in process) beside a bare tokio channel ping-pong, the same across two
//! `murnode` processes beside an A2A task whose owner is the other node (one
//! `/murmur/task/1` hop), and the resident memory and CPU of 1,000 idle brains of each
//! language.
//!
//! The round trips are timed inside the brain (`capsules/brains/pingpong`, a component:
//! `ping-*` sends to `pong-*` and waits for its answer, N times, with the monotonic clock),
//! so nothing but the host's messaging is measured. Idle figures run in a child process per
//! language (`murmur-bench brains-idle`), next to one with no brains.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use murmur_brain::{AgentConfig, Brains, NoMesh, Source};
use murmur_runtime::ports::Ports;
use murmur_runtime::{Runtime, RuntimeOptions};
use murmur_store::ArtifactStore;
use murmur_tests::{TestNode, guest, wait_for};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{Figure, summarize};

#[derive(Debug, Serialize)]
struct RoundTrips {
    name: String,
    samples: usize,
    p50_us: f64,
    p99_us: f64,
    messages_per_s: f64,
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Idle {
    pub language: String,
    pub brains: usize,
    pub rss_mib: f64,
    /// Resident memory beyond a host with no brains, per brain.
    pub rss_per_brain_kib: f64,
    /// CPU the whole process used over the idle window, as a fraction of one core.
    pub cpu_core_fraction: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    local: Vec<RoundTrips>,
    cross_node: Vec<RoundTrips>,
    task_baseline: Vec<Figure>,
    idle: Vec<Idle>,
}

fn round_trips(name: &str, result: &Value) -> RoundTrips {
    let n = result["n"].as_u64().unwrap_or(0) as usize;
    let total_s = result["total_ns"].as_f64().unwrap_or(0.0) / 1e9;
    RoundTrips {
        name: name.into(),
        samples: n,
        p50_us: result["p50_ns"].as_f64().unwrap_or(0.0) / 1e3,
        p99_us: result["p99_ns"].as_f64().unwrap_or(0.0) / 1e3,
        // Each round trip is two messages.
        messages_per_s: if total_s > 0.0 { 2.0 * n as f64 / total_s } else { 0.0 },
    }
}

/// A brain host on `dir` running `configs` (no network), once every agent runs.
async fn host(dir: &Path, pooling: bool, configs: Vec<AgentConfig>) -> anyhow::Result<Brains> {
    let store = Arc::new(ArtifactStore::open(&dir.join("store"))?);
    let runtime =
        Runtime::new(RuntimeOptions::new(dir.to_path_buf(), pooling), store.clone(), Ports::standalone()?)?;
    let brains = Brains::start(
        configs,
        runtime,
        store,
        &dir.join("brains.redb"),
        &dir.join("agents"),
        Arc::new(NoMesh),
        Arc::new(murmur_brain::NoMcp),
    )?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while brains.status().iter().any(|s| s.state != "running") {
        anyhow::ensure!(Instant::now() < deadline, "the brains did not all start: {:?}", brains.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(brains)
}

/// Ping-pong between two brains of one in-process brain host.
async fn local(samples: usize) -> anyhow::Result<RoundTrips> {
    let dir = tempfile::tempdir()?;
    let brain = Source::File(guest("pingpong_brain"));
    let configs = vec![AgentConfig::new("ping-local", brain.clone()), AgentConfig::new("pong-local", brain)];
    let brains = host(dir.path(), true, configs).await?;
    // Both subscribe in their first instants; give them a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    brains.send_as_client("ping-local", format!("go {}", samples / 10)).await.map_err(anyhow::Error::msg)?;
    wait_result(|| brains.memory("ping-local").ok().and_then(|m| m.into_iter().find(|(k, _)| k == "result")))
        .await?;
    brains.send_as_client("ping-local", format!("go {samples}")).await.map_err(anyhow::Error::msg)?;
    loop {
        let result = wait_result(|| {
            brains.memory("ping-local").ok().and_then(|m| m.into_iter().find(|(k, _)| k == "result"))
        })
        .await?;
        let value: Value = serde_json::from_str(&result)?;
        if value["n"].as_u64() == Some(samples as u64) {
            brains.shutdown(Duration::from_secs(5)).await;
            return Ok(round_trips("send-agent → recv, two brains of one node", &value));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_result(read: impl Fn() -> Option<(String, String)>) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some((_, value)) = read() {
            return Ok(value);
        }
        anyhow::ensure!(Instant::now() < deadline, "no result from the ping brain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ping-pong between two tokio tasks over bounded channels: the floor. Both ends are
/// spawned tasks on the same two-worker runtime, as the two brains are.
async fn tokio_channel(samples: usize) -> RoundTrips {
    let (to_pong, mut pong_rx) = tokio::sync::mpsc::channel::<u64>(256);
    let (to_ping, mut ping_rx) = tokio::sync::mpsc::channel::<u64>(256);
    tokio::spawn(async move {
        while let Some(n) = pong_rx.recv().await {
            if to_ping.send(n).await.is_err() {
                break;
            }
        }
    });
    let ping = tokio::spawn(async move {
        let mut micros = Vec::with_capacity(samples);
        let started = Instant::now();
        for n in 0..samples as u64 {
            let sent = Instant::now();
            let _ = to_pong.send(n).await;
            let _ = ping_rx.recv().await;
            micros.push(sent.elapsed().as_secs_f64() * 1e6);
        }
        (micros, started.elapsed().as_secs_f64())
    });
    let (micros, total) = ping.await.unwrap_or_default();
    let figure = summarize("tokio mpsc ping-pong, two tasks (baseline)", micros);
    RoundTrips {
        name: figure.name,
        samples,
        p50_us: figure.p50_us,
        p99_us: figure.p99_us,
        messages_per_s: 2.0 * samples as f64 / total,
    }
}

fn agent_config(name: &str, brain: &Path) -> String {
    format!("[[agents]]\nname = \"{name}\"\nbrain = \"{}\"\n", brain.display())
}

fn node(
    agent: &str,
    capsule: &str,
    bootstrap: Option<&TestNode>,
) -> anyhow::Result<(TestNode, tempfile::TempDir)> {
    let config = format!(
        "[adverts]\nrefresh_secs = 1\nttl_secs = 30\n{}",
        agent_config(agent, &guest("pingpong_brain"))
    );
    crate::tasks::node_with(&config, capsule, bootstrap)
}

/// Ping on node A, pong on node B; beside it, blocking echo tasks owned by A and by B.
fn cross_node(samples: usize) -> anyhow::Result<(RoundTrips, Vec<Figure>)> {
    let (a, _a_dir) = node("ping-x", "echo", None)?;
    let (_b, _b_dir) = node("pong-x", "echo-remote", Some(&a))?;
    wait_for(Duration::from_secs(30), "A to know pong-x and echo-remote", || {
        let agents = a.get("/v1/agents").ok()?;
        let both = agents["agents"].as_array()?.iter().filter(|x| x["state"] == "running").count() == 2;
        (both && a.capsule_names().iter().any(|n| n == "echo-remote")).then_some(())
    })?;
    let client = reqwest::blocking::Client::new();
    let go = |n: usize| -> anyhow::Result<Value> {
        let before = a.get("/v1/agents/ping-x/memory?key=result").ok().map(|v| v.to_string());
        let answer = client
            .post(format!("{}/v1/agents/ping-x/messages", a.api))
            .json(&json!({ "text": format!("go {n}") }))
            .send()?;
        anyhow::ensure!(answer.status().is_success(), "go: {}", answer.text()?);
        let result = wait_for(Duration::from_secs(300), "the ping brain's result", || {
            let now = a.get("/v1/agents/ping-x/memory?key=result").ok()?;
            (Some(now.to_string()) != before && now["entries"].is_array()).then_some(now)
        })?;
        Ok(serde_json::from_str(result["entries"][0]["value"].as_str().unwrap_or("{}"))?)
    };
    go(samples / 10)?;
    let figure = round_trips("send-agent → recv, brains on two nodes", &go(samples)?);

    let url = format!("{}/", a.api);
    let task = |tenant: &str, id: usize| -> anyhow::Result<f64> {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": {
            "tenant": tenant,
            "message": { "messageId": format!("brains-bench-{}-{tenant}-{id}", std::process::id()), "parts": [{ "text": "x" }] },
        }});
        let started = Instant::now();
        let answer: Value = client.post(&url).json(&body).send()?.json()?;
        anyhow::ensure!(answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", "{answer}");
        Ok(started.elapsed().as_secs_f64() * 1e6)
    };
    let (mut local, mut mesh) = (Vec::new(), Vec::new());
    for i in 0..samples.min(2000) {
        local.push(task("echo", i)?);
        mesh.push(task("echo-remote", i)?);
    }
    let baseline = vec![
        summarize("A2A echo task, owner = this node", local),
        summarize("A2A echo task, owner = the other node (/murmur/task/1)", mesh),
    ];
    Ok((figure, baseline))
}

/// The idle brain of each language.
fn idle_source(dir: &Path, language: &str) -> anyhow::Result<Source> {
    Ok(match language {
        "rhai" => {
            let path = dir.join("idle.rhai");
            std::fs::write(&path, "subscribe_lifecycle();\nloop { try { recv(); } catch {} }\n")?;
            Source::File(path)
        }
        "js" => {
            let path = dir.join("idle.js");
            std::fs::write(&path, "subscribe_lifecycle();\nwhile (true) { try { recv(); } catch (e) {} }\n")?;
            Source::File(path)
        }
        "wasm" => Source::File(guest("example_brain")),
        "none" => Source::File(PathBuf::new()),
        other => anyhow::bail!("unknown language {other}"),
    })
}

fn rss_kib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// CPU seconds this process used (user + system).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: utime and stime are fields 12 and 13 (0-based from state).
    (ticks(11) + ticks(12)) / 100.0
}

/// The child process: `count` idle brains of `language`, then its memory and CPU.
pub fn idle_child(language: &str, count: usize) -> anyhow::Result<()> {
    let threads = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    threads.block_on(async {
        let dir = tempfile::tempdir()?;
        let source = idle_source(dir.path(), language)?;
        let configs = if language == "none" {
            Vec::new()
        } else {
            (0..count).map(|i| AgentConfig::new(&format!("idle-{i}"), source.clone())).collect()
        };
        // One instance slot per long-lived component: on-demand allocation past 128.
        let _brains = host(dir.path(), false, configs).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let cpu = cpu_seconds();
        let window = Duration::from_secs(10);
        tokio::time::sleep(window).await;
        let cpu = (cpu_seconds() - cpu) / window.as_secs_f64();
        let idle = Idle {
            language: language.into(),
            brains: if language == "none" { 0 } else { count },
            rss_mib: rss_kib() / 1024.0,
            rss_per_brain_kib: 0.0,
            cpu_core_fraction: cpu,
        };
        println!("{}", serde_json::to_string(&idle)?);
        anyhow::Ok(())
    })
}

fn idle(count: usize) -> anyhow::Result<Vec<Idle>> {
    let exe = std::env::current_exe()?;
    let mut figures: Vec<Idle> = Vec::new();
    for language in ["none", "rhai", "js", "wasm"] {
        let out = std::process::Command::new(&exe)
            .args(["brains-idle", "--language", language, "--count", &count.to_string()])
            .env("MURNODE_LOG", "warn")
            .output()?;
        anyhow::ensure!(out.status.success(), "idle {language}: {}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_owned();
        figures.push(serde_json::from_str(&line)?);
    }
    let base = figures[0].rss_mib;
    for figure in figures.iter_mut().skip(1) {
        figure.rss_per_brain_kib = (figure.rss_mib - base) * 1024.0 / figure.brains as f64;
    }
    Ok(figures)
}

pub fn run(samples: usize, idle_count: usize, out: &Path) -> anyhow::Result<()> {
    let threads = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let local =
        threads.block_on(async { anyhow::Ok(vec![local(samples).await?, tokio_channel(samples).await]) })?;
    let (cross, task_baseline) = cross_node(samples)?;
    let idle = idle(idle_count)?;
    let report = Report { local, cross_node: vec![cross], task_baseline, idle };

    println!("{:<56} {:>8} {:>10} {:>10} {:>12}", "round trip", "samples", "p50 µs", "p99 µs", "messages/s");
    for r in report.local.iter().chain(&report.cross_node) {
        println!(
            "{:<56} {:>8} {:>10.1} {:>10.1} {:>12.0}",
            r.name, r.samples, r.p50_us, r.p99_us, r.messages_per_s
        );
    }
    for f in &report.task_baseline {
        println!("{:<56} {:>8} {:>10.1} {:>10.1}", f.name, f.samples, f.p50_us, f.p99_us);
    }
    println!(
        "local brain round trip / tokio channel: {:.1}x (p50); cross-node brain round trip / mesh task: {:.2}x (p50)",
        report.local[0].p50_us / report.local[1].p50_us,
        report.cross_node[0].p50_us / report.task_baseline[1].p50_us
    );
    println!("\n{:<8} {:>7} {:>10} {:>14} {:>10}", "idle", "brains", "RSS MiB", "KiB per brain", "CPU core");
    for i in &report.idle {
        println!(
            "{:<8} {:>7} {:>10.1} {:>14.1} {:>10.4}",
            i.language, i.brains, i.rss_mib, i.rss_per_brain_kib, i.cpu_core_fraction
        );
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
