//! The example brain, as a WebAssembly component of world `murmur:brain/brain@0.1.0`. The
//! same brain is written in rhai (`../example.rhai`) and JavaScript (`../example.js`); a
//! test drives all three alike and compares what they remember.
//!
//! It remembers who it is and how often it ran, listens to operators (`mur`) and obeys:
//! `subscribe NAME` (hear agent NAME), `send NAME TEXT`, `timer MS LABEL`, `cancel LABEL`,
//! `remember KEY VALUE`. A message from a subscribed agent is remembered as `from:NAME`,
//! and one starting with `ping` is answered `pong <me>`. A fired timer is remembered as
//! `timer:LABEL`. On `reload` or `shutdown` it remembers which and exits.

wit_bindgen::generate!({
    path: ["../../../wit/brain"],
    world: "murmur:brain/brain@0.1.0",
    generate_all,
});

use std::collections::BTreeMap;

use exports::murmur::brain::agent::Guest;
use murmur::brain::host;
use murmur::brain::types::Event;

struct Example;

fn remember(key: &str, value: &str) {
    if let Err(error) = host::memory_set(key, value) {
        host::log("error", &format!("memory-set {key}: {error}"));
    }
}

impl Guest for Example {
    fn run() -> Result<(), String> {
        let me = host::whoami();
        host::subscribe_lifecycle()?;
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        names.insert(host::subscribe_agent("mur")?, "mur".into());
        remember("whoami", &me);
        let runs = host::memory_get("runs")?.and_then(|r| r.parse::<u64>().ok()).unwrap_or(0) + 1;
        remember("runs", &runs.to_string());
        let mut timers: BTreeMap<String, String> = BTreeMap::new();
        host::log("info", &format!("{me} is up (run {runs})"));
        loop {
            let Ok(envelope) = host::recv() else { continue };
            match envelope.event {
                Event::Message(text) => {
                    let from = names.get(&envelope.id).cloned().unwrap_or_default();
                    if from == "mur" {
                        let mut words = text.splitn(3, ' ');
                        let (command, first, rest) = (words.next().unwrap_or(""), words.next().unwrap_or(""), words.next().unwrap_or(""));
                        match command {
                            "subscribe" => {
                                let id = host::subscribe_agent(first)?;
                                names.insert(id, first.to_owned());
                                remember("subscribed", first);
                            }
                            "send" => {
                                if let Err(error) = host::send_agent(first, rest) {
                                    remember("send_error", &error);
                                }
                            }
                            "timer" => {
                                let id = host::wait_for(first.parse().unwrap_or(0))?;
                                timers.insert(id, rest.to_owned());
                            }
                            "cancel" => {
                                let found = timers.iter().find(|(_, label)| *label == first).map(|(id, _)| id.clone());
                                if let Some(id) = found {
                                    host::cancel_timer(&id);
                                    timers.remove(&id);
                                }
                            }
                            "remember" => remember(first, rest),
                            _ => host::log("warn", &format!("unknown command: {text}")),
                        }
                    } else {
                        remember(&format!("from:{from}"), &text);
                        if text.starts_with("ping") {
                            let _ = host::send_agent(&from, &format!("pong {me}"));
                        }
                    }
                }
                Event::Timer => {
                    let label = timers.remove(&envelope.id).unwrap_or_default();
                    remember(&format!("timer:{label}"), "fired");
                }
                Event::Reload => {
                    remember("last_lifecycle", "reload");
                    return Ok(());
                }
                Event::Shutdown => {
                    remember("last_lifecycle", "shutdown");
                    return Ok(());
                }
                Event::Error(error) => remember("lifecycle_error", &error),
                _ => {}
            }
        }
    }
}

export!(Example);
