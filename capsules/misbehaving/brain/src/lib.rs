//! A hostile brain, for tests: what it does depends on its agent's name (several agents
//! share it). `…spin…` loops forever without waiting; `…bomb…` grows its memory without
//! bound; `…flood…` sends to agent `sink` as fast as it can, forever; `…hoard…` asks the
//! host to store a 1 MiB value, then remembers what the host said. Anything else waits.

wit_bindgen::generate!({
    path: ["../../../wit/brain"],
    world: "murmur:brain/brain@0.1.0",
    generate_all,
});

use exports::murmur::brain::agent::Guest;
use murmur::brain::host;

struct Hostile;

impl Guest for Hostile {
    fn run() -> Result<(), String> {
        let me = host::whoami();
        if me.contains("spin") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if me.contains("bomb") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        if me.contains("flood") {
            let mut refused: u64 = 0;
            loop {
                if host::send_agent("sink", "flood").is_err() {
                    refused += 1;
                    if refused % 1000 == 0 {
                        host::log("info", &format!("{refused} sends refused"));
                    }
                }
            }
        }
        if me.contains("hoard") {
            let answer = match host::memory_set("big", &"x".repeat(1 << 20)) {
                Ok(()) => "stored".to_owned(),
                Err(error) => error,
            };
            host::memory_set("answer", &answer)?;
        }
        loop {
            let _ = host::recv();
        }
    }
}

export!(Hostile);
