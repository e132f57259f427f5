//! A benchmark brain (`murmur-bench brains`). Agent `ping-X` waits for `go N` from `mur`,
//! then sends `p` to agent `pong-X` N times, each time waiting for its answer, timing each
//! round trip with the monotonic clock; it remembers the distribution as `result`
//! (`{"n":…,"p50_ns":…,"p99_ns":…,"total_ns":…}`). Agent `pong-X` answers every message
//! from `ping-X`.

wit_bindgen::generate!({
    path: ["../../../wit/brain"],
    world: "murmur:brain/brain@0.1.0",
    generate_all,
});

use std::time::Instant;

use exports::murmur::brain::agent::Guest;
use murmur::brain::host;
use murmur::brain::types::Event;

struct PingPong;

fn next_message() -> (String, String) {
    loop {
        if let Ok(envelope) = host::recv()
            && let Event::Message(text) = envelope.event
        {
            return (envelope.id, text);
        }
    }
}

impl Guest for PingPong {
    fn run() -> Result<(), String> {
        let me = host::whoami();
        if let Some(suffix) = me.strip_prefix("pong") {
            let ping = format!("ping{suffix}");
            host::subscribe_agent(&ping)?;
            loop {
                let (_, text) = next_message();
                let _ = host::send_agent(&ping, &text);
            }
        }
        let pong = format!("pong{}", me.strip_prefix("ping").unwrap_or(""));
        let cli = host::subscribe_agent("mur")?;
        host::subscribe_agent(&pong)?;
        loop {
            let (id, text) = next_message();
            if id != cli {
                continue;
            }
            let count: usize = text.strip_prefix("go ").and_then(|n| n.trim().parse().ok()).unwrap_or(0);
            let mut samples = Vec::with_capacity(count);
            let started = Instant::now();
            for _ in 0..count {
                let sent = Instant::now();
                host::send_agent(&pong, "p")?;
                loop {
                    let (from, _) = next_message();
                    if from != cli {
                        break;
                    }
                }
                samples.push(sent.elapsed().as_nanos() as u64);
            }
            let total = started.elapsed().as_nanos() as u64;
            samples.sort_unstable();
            let at = |p: f64| samples.get(((p / 100.0) * (samples.len().max(1) - 1) as f64).round() as usize).copied().unwrap_or(0);
            let result = format!(
                r#"{{"n":{count},"p50_ns":{},"p99_ns":{},"total_ns":{total}}}"#,
                at(50.0),
                at(99.0)
            );
            host::memory_set("result", &result)?;
        }
    }
}

export!(PingPong);
