use super::*;
use crate::advert::{Advert, HostedCapsule};
use crate::directory::{DirectoryConfig, Source};
use crate::identity::SecretKey;
use crate::signed::Signed;
use crate::task::{Check, Sender};

const T0: Millis = Millis(1_800_000_000_000);

fn key(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

fn directory(hosts: &[(u8, u16)]) -> Directory {
    let mut dir = Directory::new(DirectoryConfig::default());
    for (n, load) in hosts {
        let mut advert = Advert::new(1, T0, 90_000);
        advert.load = *load;
        advert.capsules = vec![HostedCapsule { name: "echo".into(), digest: None, version: "1".into() }];
        dir.insert(T0, Signed::sign(advert, &key(*n)).unwrap().into_envelope(), Source::Local).unwrap();
    }
    dir
}

fn request(message: &str) -> Submit {
    Submit {
        task: TaskId::derive("client", message),
        text: "hi".into(),
        sender: Sender::Client,
        capsule: "echo".into(),
        context: None,
        message: message.into(),
        traceparent: None,
        settle_wait_ms: 0,
    }
}

fn drain(router: &mut Router) -> Vec<Output> {
    std::iter::from_fn(|| router.poll_output()).collect()
}

fn rtt(table: &[(u8, u32)]) -> impl Fn(&NodeId) -> Option<u32> + '_ {
    move |node| table.iter().find(|(n, _)| key(*n).node_id() == *node).map(|(_, ms)| *ms)
}

#[test]
fn local_first_then_cheapest_with_a_stable_tie_break() {
    let dir = directory(&[(1, 0), (2, 0), (3, 900), (4, 0)]);
    let router = Router::new(key(1).node_id(), RouterConfig::default());
    let table = [(2, 20), (3, 5), (4, 20)];
    let ranked = router.candidates(T0, "echo", None, &dir, &rtt(&table));
    assert_eq!(ranked[0], key(1).node_id(), "local first");
    // node 3: 5 ms + 90 (load 900) = 95 > nodes 2 and 4 at 20 ms; 2 and 4 tie on cost.
    let (a, b) = if key(2).node_id() < key(4).node_id() { (2, 4) } else { (4, 2) };
    assert_eq!(&ranked[1..], &[key(a).node_id(), key(b).node_id(), key(3).node_id()]);
    let pinned = router.candidates(T0, "echo", Some(key(3).node_id()), &dir, &rtt(&table));
    assert_eq!(pinned, vec![key(3).node_id()]);
}

#[test]
fn fails_over_only_when_delivery_provably_failed() {
    let dir = directory(&[(2, 0), (3, 0)]);
    let mut router = Router::new(key(1).node_id(), RouterConfig::default());
    let table = [(2, 1), (3, 2)];
    router.handle(T0, Input::Submit { request: request("m1"), pin: None }, &dir, &rtt(&table));
    assert!(
        matches!(&drain(&mut router)[..], [Output::Deliver { provider, .. }] if *provider == key(2).node_id())
    );
    let task = request("m1").task;
    router.handle(
        T0,
        Input::NotDelivered { task, provider: key(2).node_id(), reason: "dial failed".into() },
        &dir,
        &rtt(&table),
    );
    assert!(
        matches!(&drain(&mut router)[..], [Output::Deliver { provider, .. }] if *provider == key(3).node_id())
    );
    router.handle(T0, Input::Accepted { task, provider: key(3).node_id() }, &dir, &rtt(&table));
    assert_eq!(drain(&mut router), vec![Output::Routed { task, owner: key(3).node_id() }]);
    assert_eq!(router.owner(&task), Some(key(3).node_id()));
    // The same message again is the same task: no second delivery.
    router.handle(T0, Input::Submit { request: request("m1"), pin: None }, &dir, &rtt(&table));
    assert_eq!(drain(&mut router), vec![Output::Routed { task, owner: key(3).node_id() }]);
    assert_eq!(router.stats().duplicates, 1);
}

#[test]
fn lost_and_timed_out_deliveries_fail_rather_than_retry() {
    let dir = directory(&[(2, 0), (3, 0)]);
    let mut router = Router::new(key(1).node_id(), RouterConfig { accept_timeout_ms: 1000 });
    let none = |_: &NodeId| None;
    router.handle(T0, Input::Submit { request: request("a"), pin: None }, &dir, &none);
    router.handle(T0, Input::Submit { request: request("b"), pin: None }, &dir, &none);
    let delivered = drain(&mut router);
    let Output::Deliver { provider, .. } = &delivered[0] else { panic!() };
    router.handle(
        T0,
        Input::Lost { task: request("a").task, provider: *provider, reason: "timeout".into() },
        &dir,
        &none,
    );
    assert!(
        matches!(&drain(&mut router)[..], [Output::Failed { reason, .. }] if reason.contains("not retried"))
    );
    assert_eq!(router.poll_timeout(), Some(T0.plus(1000)));
    router.handle(T0.plus(1000), Input::Tick, &dir, &none);
    assert!(matches!(&drain(&mut router)[..], [Output::Failed { task, .. }] if *task == request("b").task));
}

#[test]
fn a_retry_after_an_unknown_outcome_goes_only_to_the_possible_owner() {
    let dir = directory(&[(2, 0), (3, 0)]);
    let mut router = Router::new(key(1).node_id(), RouterConfig { accept_timeout_ms: 1000 });
    let table = [(2, 1), (3, 2)];
    let (first, second) = (key(2).node_id(), key(3).node_id());
    let task = request("m").task;
    // Delivered to node 2, then no answer: node 2 may hold the task.
    router.handle(T0, Input::Submit { request: request("m"), pin: None }, &dir, &rtt(&table));
    drain(&mut router);
    router.handle(T0, Input::Lost { task, provider: first, reason: "timeout".into() }, &dir, &rtt(&table));
    drain(&mut router);
    assert_eq!((router.owner(&task), router.possible_owner(&task)), (None, Some(first)));
    // The client retries: only node 2 is asked, even though node 3 is as good.
    router.handle(T0, Input::Submit { request: request("m"), pin: None }, &dir, &rtt(&table));
    assert_eq!(drain(&mut router), vec![Output::Deliver { provider: first, request: request("m") }]);
    // Node 2 is busy: the retry fails again instead of moving to node 3.
    router.handle(
        T0,
        Input::NotDelivered { task, provider: first, reason: "busy".into() },
        &dir,
        &rtt(&table),
    );
    assert!(
        matches!(&drain(&mut router)[..], [Output::Failed { reason, .. }] if reason.contains("not placed elsewhere"))
    );
    // It times out too: still only node 2.
    router.handle(T0, Input::Submit { request: request("m"), pin: None }, &dir, &rtt(&table));
    drain(&mut router);
    router.handle(T0.plus(1000), Input::Tick, &dir, &rtt(&table));
    assert!(matches!(&drain(&mut router)[..], [Output::Failed { .. }]));
    // A third try finds node 2 holding it: routed there, and remembered as its owner.
    router.handle(T0, Input::Submit { request: request("m"), pin: None }, &dir, &rtt(&table));
    assert!(matches!(&drain(&mut router)[..], [Output::Deliver { provider, .. }] if *provider == first));
    router.handle(T0, Input::Accepted { task, provider: first }, &dir, &rtt(&table));
    assert_eq!(drain(&mut router), vec![Output::Routed { task, owner: first }]);
    assert_eq!(router.owner(&task), Some(first));
    assert_ne!(router.owner(&task), Some(second));
    assert_eq!(router.stats().retries_to_possible_owner, 3);
}

#[test]
fn grant_refusals_are_final_and_no_provider_is_a_failure() {
    let dir = directory(&[(2, 0), (3, 0)]);
    let mut router = Router::new(key(1).node_id(), RouterConfig::default());
    let none = |_: &NodeId| None;
    router.handle(T0, Input::Submit { request: request("a"), pin: None }, &dir, &none);
    let Output::Deliver { provider, .. } = drain(&mut router).remove(0) else { panic!() };
    let task = request("a").task;
    router.handle(
        T0,
        Input::Refused { task, provider, check: Check::named("expired"), reason: "grant expired".into() },
        &dir,
        &none,
    );
    assert!(
        matches!(&drain(&mut router)[..], [Output::Rejected { check, .. }] if check.as_str() == "expired")
    );
    let mut other = request("b");
    other.capsule = "nothing".into();
    router.handle(T0, Input::Submit { request: other, pin: None }, &dir, &none);
    assert!(
        matches!(&drain(&mut router)[..], [Output::Failed { reason, .. }] if reason.contains("no live node hosts mesh://nothing"))
    );
}

#[test]
fn exhausting_every_candidate_fails_with_what_was_tried() {
    let dir = directory(&[(2, 0)]);
    let mut router = Router::new(key(1).node_id(), RouterConfig::default());
    let none = |_: &NodeId| None;
    router.handle(T0, Input::Submit { request: request("a"), pin: None }, &dir, &none);
    let _ = drain(&mut router);
    router.handle(
        T0,
        Input::NotDelivered {
            task: request("a").task,
            provider: key(2).node_id(),
            reason: "not_hosted".into(),
        },
        &dir,
        &none,
    );
    assert!(
        matches!(&drain(&mut router)[..], [Output::Failed { reason, .. }] if reason.contains("not_hosted"))
    );
}

#[test]
fn answers_map_to_failover_only_for_refusals_that_say_nothing_ran() {
    let (task, provider) = (request("m").task, key(2).node_id());
    let refused = |check: &str| TaskResponse::Refused { check: check.into(), reason: "why".into() };
    for check in ["not_hosted", "not_accepting", "busy", "overloaded"] {
        assert!(Check::named(check).is_retryable());
        let input = Input::answered(task, provider, submit_outcome(refused(check)));
        assert!(matches!(input, Input::NotDelivered { reason, .. } if reason == format!("{check}: why")));
    }
    let input = Input::answered(task, provider, submit_outcome(refused("untrusted_issuer")));
    assert!(matches!(input, Input::Refused { check, .. } if check.as_str() == "untrusted_issuer"));
    let input = Input::answered(task, provider, submit_outcome(TaskResponse::NotFound));
    assert!(matches!(input, Input::Refused { check: Check::Protocol, .. }));
}
