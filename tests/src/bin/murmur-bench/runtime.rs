//! Runtime figures, each a distribution of single-operation timings.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use murmur_runtime::ports::Ports;
use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions, ToolInput};
use murmur_store::ArtifactStore;

use crate::summarize;

fn runtime(dir: &Path, pooling: bool) -> anyhow::Result<Runtime> {
    let store = Arc::new(ArtifactStore::open(&dir.join("store"))?);
    let runtime = Runtime::new(RuntimeOptions::new(dir.to_path_buf(), pooling), store, Ports::standalone()?)?;
    for (name, kind, extra) in [
        ("echo", "tool", String::new()),
        (
            "invoke_loop",
            "capsule",
            "[capabilities]\ntools = [\"echo\"]\n[wasi]\nenv = { INVOKE_COUNT = \"@COUNT@\" }\n".to_owned(),
        ),
    ] {
        for (suffix, count) in [("", "0"), ("-200", "200")] {
            if kind == "tool" && !suffix.is_empty() {
                continue;
            }
            let text = format!(
                "name = \"{}{suffix}\"\nversion = \"1\"\nkind = \"{kind}\"\nartifact = \"{}\"\n{}",
                name.replace('_', "-"),
                murmur_tests::guest(name).display(),
                extra.replace("@COUNT@", count)
            );
            runtime.install(CapsuleManifest::parse(&text, Path::new("/"), dir)?)?;
        }
    }
    Ok(runtime)
}

async fn fresh_calls(runtime: &Runtime, iterations: usize) -> anyhow::Result<Vec<f64>> {
    let input = || ToolInput { data: Some("x".into()), log_path: None };
    for _ in 0..iterations / 10 {
        runtime.run_tool("echo", input()).await?;
    }
    let mut micros = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        runtime.run_tool("echo", input()).await?;
        micros.push(start.elapsed().as_secs_f64() * 1e6);
    }
    Ok(micros)
}

pub fn run(iterations: usize, out: &Path) -> anyhow::Result<()> {
    let threads = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let figures = threads.block_on(async {
        let dir = tempfile::tempdir()?;
        let pooled = runtime(&dir.path().join("pooled"), true)?;
        let on_demand = runtime(&dir.path().join("on-demand"), false)?;
        let mut figures = vec![
            summarize("store + instantiate + call, pooling", fresh_calls(&pooled, iterations).await?),
            summarize("store + instantiate + call, on-demand", fresh_calls(&on_demand, iterations).await?),
        ];
        let mut live = pooled.live_tool("echo").await?;
        let mut micros = Vec::with_capacity(iterations * 5);
        for i in 0..iterations * 5 {
            let input = ToolInput { data: Some("x".into()), log_path: None };
            let start = Instant::now();
            live.call(input).await?;
            if i >= iterations / 2 {
                micros.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        figures.push(summarize("call on a live instance", micros));
        // One invoke hop: a capsule that invokes echo 200 times, minus one that does not.
        let runs = (iterations / 200).max(20);
        let (mut zero, mut two_hundred) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let start = Instant::now();
            pooled.run_capsule("invoke-loop").await?;
            zero.push(start.elapsed().as_secs_f64() * 1e6);
            let start = Instant::now();
            pooled.run_capsule("invoke-loop-200").await?;
            two_hundred.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let per_hop: Vec<f64> = two_hundred.iter().zip(&zero).map(|(t, z)| (t - z) / 200.0).collect();
        figures.push(summarize("tool-registry invoke hop (capsule → tool)", per_hop));
        anyhow::Ok(figures)
    })?;
    println!("{:<46} {:>8} {:>10} {:>10}", "capsule runtime", "samples", "p50 µs", "p99 µs");
    for f in &figures {
        println!("{:<46} {:>8} {:>10.2} {:>10.2}", f.name, f.samples, f.p50_us, f.p99_us);
    }
    println!("pooling vs on-demand (p50): {:.2}x faster", figures[1].p50_us / figures[0].p50_us);
    std::fs::write(out, serde_json::to_string_pretty(&figures)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
