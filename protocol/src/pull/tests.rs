use proptest::prelude::*;

use super::*;
use crate::identity::SecretKey;

const T0: Millis = Millis(1_800_000_000_000);

fn node(n: u8) -> NodeId {
    SecretKey::from_seed([n; 32]).node_id()
}

/// A blob of `chunks` chunks of 100 bytes (the last 50), and its chunk digests.
fn blob(chunks: u32) -> (u64, Vec<Digest>) {
    let size = u64::from(chunks) * 100 - 50;
    (size, (0..chunks).map(|i| Digest::of(&i.to_le_bytes())).collect())
}

fn pull(chunks: u32, have: &[u32]) -> Pull {
    let (size, digests) = blob(chunks);
    Pull::new(PullConfig::default(), size, 100, digests, have).unwrap()
}

fn drain(pull: &mut Pull) -> Vec<Output> {
    std::iter::from_fn(|| pull.poll_output()).collect()
}

fn requests(outputs: &[Output]) -> Vec<(NodeId, u32)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Request { provider, index, .. } => Some((*provider, *index)),
            _ => None,
        })
        .collect()
}

/// The good answer to a request.
fn good(p: &Pull, provider: NodeId, index: u32) -> Input {
    Input::Chunk { provider, index, digest: p.expected[index as usize], len: p.range(index).1 }
}

#[test]
fn two_providers_share_the_chunks_and_every_chunk_is_written_once() {
    let mut p = pull(10, &[]);
    p.handle(T0, Input::AddProvider(node(1)));
    p.handle(T0, Input::AddProvider(node(2)));
    let mut written = Vec::new();
    let mut now = T0;
    while !p.is_done() {
        let asked = requests(&drain(&mut p));
        assert!(!asked.is_empty(), "the pull keeps asking while chunks are missing");
        now = now.plus(5);
        for (provider, index) in asked {
            p.handle(now, good(&p, provider, index));
            for output in drain(&mut p) {
                match output {
                    Output::Write { index, .. } => written.push(index),
                    Output::Request { provider, index, .. } => p.handle(now, good(&p, provider, index)),
                    _ => {}
                }
            }
        }
    }
    written.sort_unstable();
    written.dedup();
    assert_eq!(written, (0..10).collect::<Vec<_>>());
    assert_eq!(p.stats().bytes_written, p.size);
    assert_eq!(p.range(9), (900, 50), "the last chunk is short");
}

#[test]
fn a_provider_serving_bad_bytes_is_dropped_and_the_chunk_comes_from_another() {
    let mut p = pull(2, &[]);
    p.handle(T0, Input::AddProvider(node(1)));
    p.handle(T0, Input::AddProvider(node(2)));
    let asked = requests(&drain(&mut p));
    let (liar, index) = asked[0];
    p.handle(T0.plus(1), Input::Chunk { provider: liar, index, digest: Digest::of(b"evil"), len: 100 });
    let outputs = drain(&mut p);
    assert!(outputs.iter().any(|o| matches!(o, Output::Penalize { provider, .. } if *provider == liar)));
    assert!(!outputs.iter().any(|o| matches!(o, Output::Write { .. })), "bad bytes are never written");
    assert!(p.dropped().contains(&liar));
    // The chunk is asked again, of the honest provider only.
    let again = requests(&outputs);
    assert!(again.iter().all(|(provider, _)| *provider != liar));
    assert!(again.iter().any(|(_, i)| *i == index));
    // The liar cannot come back into this pull.
    p.handle(T0.plus(2), Input::AddProvider(liar));
    assert!(requests(&drain(&mut p)).iter().all(|(provider, _)| *provider != liar));
}

#[test]
fn a_silent_provider_times_out_and_its_late_answer_still_fills_the_missing_chunk_once() {
    let config = PullConfig { timeout_ms: 1000, hedge_after_ms: 5000, ..PullConfig::default() };
    let (size, digests) = blob(1);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    p.handle(T0, Input::AddProvider(node(1)));
    let first = requests(&drain(&mut p));
    assert_eq!(first.len(), 1);
    p.handle(T0, Input::AddProvider(node(2)));
    assert_eq!(p.poll_timeout(), Some(T0.plus(1000)));
    p.handle(T0.plus(1000), Input::Tick);
    let retried = requests(&drain(&mut p));
    assert_eq!(retried.len(), 1);
    assert_ne!(retried[0].0, first[0].0, "asked of the other provider");
    assert_eq!(p.in_flight_to(&first[0].0), 1, "the expired request still counts against its provider");
    assert!(p.poll_timeout().unwrap() > T0.plus(1000), "no timeout in the past");
    // The first provider answers after all, with good bytes: the chunk is still missing,
    // so they are written; the retry's answer then comes late and is ignored.
    p.handle(T0.plus(1001), good(&p, first[0].0, 0));
    assert_eq!(drain(&mut p), vec![Output::Write { index: 0, provider: first[0].0 }, Output::Done]);
    assert_eq!(p.stats().late_answers, 1);
    p.handle(T0.plus(1002), good(&p, retried[0].0, 0));
    assert!(drain(&mut p).is_empty(), "nothing is written twice");
    assert_eq!(p.stats().late_answers, 2);
}

#[test]
fn requests_that_time_out_together_are_one_strike() {
    let config = PullConfig {
        probe: 4,
        timeout_ms: 1000,
        hedge_after_ms: 5000,
        strikes_max: 2,
        ..PullConfig::default()
    };
    let (size, digests) = blob(4);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    p.handle(T0, Input::AddProvider(node(1)));
    assert_eq!(requests(&drain(&mut p)).len(), 4);
    p.handle(T0.plus(1000), Input::Tick);
    assert!(!p.dropped().contains(&node(1)), "four timeouts in one pass are one strike");
    assert_eq!(p.stats().timeouts, 4);
    // A bad late answer still bans its provider.
    p.handle(T0.plus(1001), Input::Chunk { provider: node(1), index: 0, digest: Digest::of(b"x"), len: 100 });
    assert!(drain(&mut p).iter().any(|o| matches!(o, Output::Penalize { .. })));
    p.handle(T0.plus(1002), Input::AddProvider(node(1)));
    assert!(requests(&drain(&mut p)).is_empty(), "a provider that served bad bytes never comes back");
}

#[test]
fn a_slow_request_is_hedged_with_another_provider_and_the_first_good_answer_wins() {
    let config = PullConfig { hedge_after_ms: 500, per_provider: 1, ..PullConfig::default() };
    let (size, digests) = blob(2);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    p.handle(T0, Input::AddProvider(node(1)));
    p.handle(T0, Input::AddProvider(node(2)));
    let asked = requests(&drain(&mut p));
    assert_eq!(asked.len(), 2, "one chunk each");
    // The provider of chunk 1 answers quickly and is free again; chunk 0's is slow.
    let (fast, _) = *asked.iter().find(|(_, i)| *i == 1).unwrap();
    let (slow, _) = *asked.iter().find(|(_, i)| *i == 0).unwrap();
    p.handle(T0.plus(10), good(&p, fast, 1));
    drain(&mut p);
    p.handle(T0.plus(500), Input::Tick);
    assert_eq!(requests(&drain(&mut p)), vec![(fast, 0)], "chunk 0 hedged with the fast provider");
    assert_eq!(p.stats().hedges, 1);
    p.handle(T0.plus(510), good(&p, fast, 0));
    assert_eq!(drain(&mut p), vec![Output::Write { index: 0, provider: fast }, Output::Done]);
    // The slow request still counts against its provider until it is answered.
    assert_eq!(p.in_flight_to(&slow), 1);
    assert!(p.poll_timeout().is_some_and(|t| t > T0.plus(510)), "a future moment, never one passed");
    p.handle(T0.plus(900), good(&p, slow, 0));
    assert!(drain(&mut p).is_empty(), "the slow answer is ignored");
    assert_eq!(p.in_flight(), 0);
}

#[test]
fn a_resumed_pull_asks_only_for_what_is_missing_and_stalls_without_providers() {
    let mut p = pull(4, &[0, 2]);
    assert_eq!(p.missing(), 2);
    p.handle(T0, Input::AddProvider(node(1)));
    let mut asked: Vec<u32> = requests(&drain(&mut p)).into_iter().map(|(_, i)| i).collect();
    asked.sort_unstable();
    assert_eq!(asked, vec![1, 3]);
    // The provider goes away: the pull stalls, once, and resumes with a new provider.
    p.handle(T0.plus(1), Input::RemoveProvider(node(1)));
    assert_eq!(drain(&mut p), vec![Output::Stalled { missing: 2 }]);
    p.handle(T0.plus(2), Input::Tick);
    assert!(drain(&mut p).is_empty());
    p.handle(T0.plus(3), Input::AddProvider(node(2)));
    assert_eq!(requests(&drain(&mut p)).len(), 2);
    // A complete resume is done at once.
    let mut whole = pull(2, &[0, 1]);
    whole.handle(T0, Input::Tick);
    assert_eq!(drain(&mut whole), vec![Output::Done]);
}

#[test]
fn malformed_pulls_are_refused() {
    let (size, digests) = blob(3);
    assert!(Pull::new(PullConfig::default(), size, 100, digests[..2].to_vec(), &[]).is_err());
    assert!(Pull::new(PullConfig::default(), size, 0, digests.clone(), &[]).is_err());
    assert!(Pull::new(PullConfig::default(), size, 100, digests, &[7]).is_err());
}

#[derive(Clone, Debug)]
enum Step {
    /// Answer the n-th open request: good, with bad bytes, or with a failure.
    Answer(usize, u8),
    Tick(u16),
    Add(u8),
    Remove(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..10).prop_map(|(n, kind)| Step::Answer(n, kind)),
        2 => (0u16..3000).prop_map(Step::Tick),
        1 => (1u8..6).prop_map(Step::Add),
        1 => (1u8..6).prop_map(Step::Remove),
    ]
}

proptest! {
    /// Whatever providers do, the pull never writes a chunk whose bytes were wrong, never
    /// writes a chunk twice, stays within its in-flight bounds, and finishes when an
    /// honest provider is finally given time.
    #[test]
    fn never_writes_bad_or_twice_and_finishes_with_an_honest_provider(
        chunks in 1u32..12,
        steps in proptest::collection::vec(step(), 0..120),
    ) {
        let mut p = pull(chunks, &[]);
        let mut now = T0;
        let mut open: Vec<(NodeId, u32)> = Vec::new();
        let mut written = BTreeSet::new();
        let mut last_good: BTreeMap<u32, bool> = BTreeMap::new();
        let mut check = |p: &mut Pull, open: &mut Vec<(NodeId, u32)>, last_good: &BTreeMap<u32, bool>| -> Result<(), TestCaseError> {
            let mut asked = BTreeSet::new();
            for output in drain(p) {
                match output {
                    Output::Request { provider, index, .. } => { open.push((provider, index)); asked.insert(provider); }
                    Output::Write { index, .. } => {
                        prop_assert!(last_good.get(&index).copied().unwrap_or(false), "chunk {} written from bad bytes", index);
                        prop_assert!(written.insert(index), "chunk {} written twice", index);
                    }
                    _ => {}
                }
            }
            let providers: Vec<NodeId> = p.providers.keys().copied().collect();
            prop_assert!(providers.iter().all(|n| p.in_flight_to(n) <= p.config.per_provider));
            prop_assert!(p.in_flight() <= p.config.in_flight_max);
            // A provider sent requests just now has at most its room out: a probe's worth
            // until it has served a good chunk.
            for provider in &asked {
                let (probe, window) = (p.config.probe.min(p.config.per_provider).max(1), p.config.per_provider);
                let room = p.providers.get(provider).map_or(0, |state| if state.served == 0 { probe } else { window });
                prop_assert!(p.in_flight_to(provider) <= room, "{} out to a provider with room {}", p.in_flight_to(provider), room);
            }
            Ok(())
        };
        p.handle(now, Input::AddProvider(node(1)));
        check(&mut p, &mut open, &last_good)?;
        for step in steps {
            match step {
                Step::Answer(n, kind) if !open.is_empty() => {
                    let (provider, index) = open.remove(n % open.len());
                    now = now.plus(7);
                    let input = match kind {
                        0 | 1 => { last_good.insert(index, false); Input::Chunk { provider, index, digest: Digest::of(b"bad"), len: p.range(index).1 } }
                        2 => Input::Failed { provider, index, reason: "reset".into() },
                        _ => { last_good.insert(index, true); good(&p, provider, index) }
                    };
                    p.handle(now, input);
                }
                Step::Answer(..) => {}
                Step::Tick(ms) => {
                    now = now.plus(u64::from(ms));
                    p.handle(now, Input::Tick);
                    // A tick handles every deadline that has come: the next is later, so a
                    // driver that sleeps until it never spins.
                    prop_assert!(p.poll_timeout().is_none_or(|t| t > now), "deadline {:?} at {:?}", p.poll_timeout(), now);
                }
                Step::Add(n) => p.handle(now, Input::AddProvider(node(n))),
                Step::Remove(n) => p.handle(now, Input::RemoveProvider(node(n))),
            }
            check(&mut p, &mut open, &last_good)?;
        }
        // An honest provider nobody has dropped, and time: the pull completes.
        p.handle(now, Input::AddProvider(node(200)));
        check(&mut p, &mut open, &last_good)?;
        for _ in 0..1000 {
            if p.is_done() { break; }
            now = now.plus(11_000);
            let honest: Vec<(NodeId, u32)> = open.iter().copied().filter(|(n, _)| *n == node(200)).collect();
            open.retain(|(n, _)| *n != node(200));
            for (provider, index) in honest {
                last_good.insert(index, true);
                p.handle(now, good(&p, provider, index));
                check(&mut p, &mut open, &last_good)?;
            }
            p.handle(now, Input::Tick);
            check(&mut p, &mut open, &last_good)?;
        }
        prop_assert!(p.is_done(), "missing {} with an honest provider", p.missing());
        prop_assert_eq!(written.len(), chunks as usize);
    }
}

#[test]
fn a_provider_dropped_for_failures_is_taken_back_when_added_again() {
    let config = PullConfig {
        probe: 4,
        timeout_ms: 1000,
        hedge_after_ms: 5000,
        strikes_max: 1,
        ..PullConfig::default()
    };
    let (size, digests) = blob(4);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    let honest = node(1);
    p.handle(T0, Input::AddProvider(honest));
    assert_eq!(requests(&drain(&mut p)).len(), 4);
    // A partition: every request times out, a strike (the limit here), dropped, stalled.
    p.handle(T0.plus(1000), Input::Tick);
    let outputs = drain(&mut p);
    assert!(outputs.iter().any(|o| matches!(o, Output::Penalize { .. })));
    assert!(outputs.iter().any(|o| matches!(o, Output::Stalled { missing: 4 })));
    assert!(p.dropped().contains(&honest));
    // The partition heals and the driver adds it again: it is asked again, strikes cleared.
    p.handle(T0.plus(2000), Input::AddProvider(honest));
    let asked = requests(&drain(&mut p));
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(!p.dropped().contains(&honest));
    assert_eq!(p.stats().readmitted, 1);
    for (provider, index) in asked {
        p.handle(T0.plus(2001), good(&p, provider, index));
    }
    assert!(p.is_done());
}

#[test]
fn providers_added_together_share_the_first_requests() {
    let config = PullConfig { per_provider: 32, probe: 32, in_flight_max: 64, ..PullConfig::default() };
    let (size, digests) = blob(16);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    p.add_providers(T0, &[node(1), node(2)]);
    let asked = requests(&drain(&mut p));
    assert_eq!(asked.len(), 16);
    assert_eq!(asked.iter().filter(|(provider, _)| *provider == node(1)).count(), 8);
}

#[test]
fn a_provider_that_never_answers_holds_only_its_probe_requests() {
    let config = PullConfig { per_provider: 8, probe: 2, in_flight_max: 16, ..PullConfig::default() };
    let (size, digests) = blob(40);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    let (dead, live) = (node(1), node(2));
    p.add_providers(T0, &[dead, live]);
    let asked = requests(&drain(&mut p));
    assert_eq!(asked.len(), 4, "two probes each before anyone answered: {asked:?}");
    // The live provider answers: its window opens; the dead one stays at its probes.
    let mut now = T0;
    for (provider, index) in asked.iter().copied().filter(|(provider, _)| *provider == live) {
        now = now.plus(1);
        p.handle(now, good(&p, provider, index));
    }
    drain(&mut p);
    assert_eq!(p.in_flight_to(&live), 8, "a provider that served gets its whole window");
    assert_eq!(p.in_flight_to(&dead), 2, "one that has not keeps its probes");
}

#[test]
fn in_the_endgame_chunks_held_by_a_silent_provider_are_hedged_after_twice_the_fastest_answer() {
    let config = PullConfig { per_provider: 8, probe: 2, in_flight_max: 16, ..PullConfig::default() };
    let (size, digests) = blob(12);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    let (silent, live) = (node(1), node(2));
    p.add_providers(T0, &[silent, live]);
    let first = requests(&drain(&mut p));
    let held: Vec<u32> = first.iter().filter(|(who, _)| *who == silent).map(|(_, i)| *i).collect();
    assert_eq!(held.len(), 2);
    // The live provider answers each request 5 ms after it was made, until only the
    // silent provider's chunks are missing.
    let mut now = T0;
    let mut open: Vec<(NodeId, u32)> = first;
    for _ in 0..100 {
        if p.missing() <= held.len() {
            break;
        }
        now = now.plus(5);
        for (who, index) in std::mem::take(&mut open).into_iter().filter(|(who, _)| *who == live) {
            p.handle(now, good(&p, who, index));
        }
        open = requests(&drain(&mut p));
    }
    assert_eq!(p.missing(), held.len());
    assert!(now.0 - T0.0 < 100, "well before hedge_after_ms");
    // Endgame since the live provider's first answers (5 ms): the silent provider's chunks,
    // open 10 ms by then, are asked of the live one, not after the configured 2 s.
    assert_eq!(p.stats().hedges, 2);
    let mut hedged: Vec<u32> = open.iter().filter(|(who, _)| *who == live).map(|(_, i)| *i).collect();
    hedged.sort_unstable();
    assert_eq!(hedged, held, "{open:?}");
    for index in hedged {
        p.handle(now.plus(5), good(&p, live, index));
    }
    assert!(p.is_done());
}

#[test]
fn a_hedge_goes_to_a_provider_that_has_served_never_to_another_silent_one() {
    let config = PullConfig { per_provider: 8, probe: 2, in_flight_max: 16, ..PullConfig::default() };
    let (size, digests) = blob(6);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    let (silent, live, newcomer) = (node(1), node(2), node(3));
    p.add_providers(T0, &[silent, live]);
    let mut open = requests(&drain(&mut p));
    let held: Vec<u32> = open.iter().filter(|(who, _)| *who == silent).map(|(_, i)| *i).collect();
    let mut now = T0;
    while p.missing() > held.len() {
        now = now.plus(5);
        for (who, index) in std::mem::take(&mut open).into_iter().filter(|(who, _)| *who == live) {
            p.handle(now, good(&p, who, index));
        }
        open = requests(&drain(&mut p));
        if p.missing() > held.len() && p.stats().hedges == 0 {
            // A provider nobody has heard from yet joins: idle, no answer time, the first
            // choice by load and latency, and silent too.
            p.handle(now, Input::AddProvider(newcomer));
            open.extend(requests(&drain(&mut p)));
        }
    }
    now = now.plus(1000);
    p.handle(now, Input::Tick);
    open.extend(requests(&drain(&mut p)));
    let hedged: Vec<&(NodeId, u32)> = open.iter().filter(|(_, i)| held.contains(i)).collect();
    assert_eq!(hedged.len(), held.len(), "{open:?}");
    assert!(hedged.iter().all(|(who, _)| *who == live), "{hedged:?}");
}

#[test]
fn a_good_answer_after_its_timeout_still_proves_the_provider() {
    let config =
        PullConfig { per_provider: 8, probe: 2, in_flight_max: 16, timeout_ms: 100, ..PullConfig::default() };
    let (size, digests) = blob(20);
    let mut p = Pull::new(config, size, 100, digests, &[]).unwrap();
    let slow = node(1);
    p.handle(T0, Input::AddProvider(slow));
    let asked = requests(&drain(&mut p));
    assert_eq!(asked.len(), 2);
    p.handle(T0.plus(100), Input::Tick);
    drain(&mut p);
    // A slow link: the answers come after the timeout, and verify.
    for (who, index) in asked {
        p.handle(T0.plus(150), good(&p, who, index));
    }
    drain(&mut p);
    assert_eq!(p.stats().late_answers, 2);
    assert!(p.in_flight_to(&slow) > 2, "its window opened: {}", p.in_flight_to(&slow));
}
