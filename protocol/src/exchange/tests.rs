use super::*;
use crate::advert::{Advert, HostedCapsule};
use crate::directory::{DirectoryConfig, Source};
use crate::identity::SecretKey;
use crate::signed::Signed;
use crate::task::{Sender, TaskState};

const T0: Millis = Millis(1_800_000_000_000);

fn key(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

fn node(n: u8) -> NodeId {
    key(n).node_id()
}

/// A directory where nodes `hosts` run `echo`.
fn directory(hosts: &[u8]) -> Directory {
    let mut dir = Directory::new(DirectoryConfig::default());
    for n in hosts {
        let mut advert = Advert::new(1, T0, 90_000);
        advert.capsules = vec![HostedCapsule { name: "echo".into(), digest: None, version: "1".into() }];
        dir.insert(T0, Signed::sign(advert, &key(*n)).unwrap().into_envelope(), Source::Local).unwrap();
    }
    dir
}

/// A client's task as node 1 (the fixture's node) places it.
fn request(message: &str) -> Submit {
    Submit {
        task: TaskId::placed(&node(1), &Sender::Client, message),
        text: "hi".into(),
        sender: Sender::Client,
        capsule: "echo".into(),
        context: None,
        message: message.into(),
        traceparent: None,
        settle_wait_ms: 0,
    }
}

fn snapshot(task: TaskId) -> TaskSnapshot {
    TaskSnapshot {
        seq: 1,
        task,
        state: TaskState::Submitted,
        capsule: "echo".into(),
        context: task.to_string(),
        message: None,
    }
}

fn no_rtt(_: &NodeId) -> Option<u32> {
    None
}

struct Fixture {
    exchange: TaskExchange,
    dir: Directory,
}

impl Fixture {
    /// Node 1's exchange, in a mesh where `hosts` run echo.
    fn new(hosts: &[u8], config: ExchangeConfig) -> Self {
        Self { exchange: TaskExchange::new(node(1), vec![], config), dir: directory(hosts) }
    }

    fn handle(&mut self, input: Input) -> Vec<Output> {
        self.exchange.handle(T0, input, &self.dir, &no_rtt);
        std::iter::from_fn(|| self.exchange.poll_output()).collect()
    }

    /// Submits `message` and returns the request id of the send to the first candidate.
    fn submit(&mut self, message: &str) -> (TaskId, RequestId, NodeId) {
        let out = self.handle(Input::Submit { request: request(message), pin: None });
        match &out[..] {
            [Output::Send { id, peer, request: TaskRequest::Submit(s) }] => (s.task, *id, *peer),
            other => panic!("expected one send, got {other:?}"),
        }
    }
}

#[test]
fn a_request_that_may_have_arrived_is_lost_never_sent_elsewhere() {
    for failure in [RequestFailure::Timeout, RequestFailure::ConnectionClosed, RequestFailure::Io] {
        let mut f = Fixture::new(&[2, 3], ExchangeConfig::default());
        let (task, id, _) = f.submit("m1");
        let out = f.handle(Input::Failed { id, failure, reason: "gone".into() });
        assert!(
            matches!(&out[..], [Output::Placed { task: t, placement: Placement::Failed { .. } }] if *t == task),
            "{failure:?}: {out:?}"
        );
        assert!(failure.may_have_arrived());
    }
}

#[test]
fn a_request_that_never_left_goes_to_the_next_candidate() {
    for failure in [RequestFailure::DialFailure, RequestFailure::UnsupportedProtocols] {
        let mut f = Fixture::new(&[2, 3], ExchangeConfig::default());
        let (_, id, first) = f.submit("m1");
        let out = f.handle(Input::Failed { id, failure, reason: "no route".into() });
        assert!(matches!(&out[..], [Output::Send { peer, .. }] if *peer != first), "{failure:?}: {out:?}");
    }
}

#[test]
fn an_answer_places_the_task_with_its_snapshot() {
    let mut f = Fixture::new(&[2], ExchangeConfig::default());
    let (task, id, peer) = f.submit("m1");
    let out = f.handle(Input::Answered { id, response: TaskResponse::Accepted(snapshot(task)) });
    assert_eq!(
        out,
        vec![Output::Placed {
            task,
            placement: Placement::Routed { owner: peer, snapshot: Some(snapshot(task)) }
        }]
    );
    // A retryable refusal tries the next node; a final one rejects.
    let mut f = Fixture::new(&[2, 3], ExchangeConfig::default());
    let (task, id, _) = f.submit("m2");
    let busy = TaskResponse::Refused { check: "busy".into(), reason: "one at a time".into() };
    let out = f.handle(Input::Answered { id, response: busy });
    let [Output::Send { id, .. }] = &out[..] else { panic!("{out:?}") };
    let grant = TaskResponse::Refused { check: "expired".into(), reason: "the grant expired".into() };
    let out = f.handle(Input::Answered { id: *id, response: grant });
    assert_eq!(
        out,
        vec![Output::Placed {
            task,
            placement: Placement::Rejected {
                check: Check::named("expired"),
                reason: "the grant expired".into()
            }
        }]
    );
}

#[test]
fn its_own_deliveries_go_to_its_owner() {
    let mut f = Fixture::new(&[1, 2], ExchangeConfig::default());
    let out = f.handle(Input::Submit { request: request("m1"), pin: None });
    let [Output::Admit { submit }] = &out[..] else { panic!("{out:?}") };
    let task = submit.task;
    let refused = Err((Check::NotAccepting, "task_acceptance = none".into()));
    let out = f.handle(Input::Admitted { task, outcome: refused });
    assert!(
        matches!(&out[..], [Output::Send { peer, .. }] if *peer == node(2)),
        "not accepting here: next node"
    );
}

#[test]
fn peers_requests_reach_the_owner_and_are_answered_once() {
    let mut f = Fixture::new(&[1], ExchangeConfig { inbound_max: 1, ..ExchangeConfig::default() });
    let get = TaskRequest::Get { task: request("m1").task };
    let out = f.handle(Input::Requested { from: node(2), token: 7, request: get.clone() });
    assert_eq!(out, vec![Output::Forward { token: 7, from: node(2), request: get.clone() }]);
    let out = f.handle(Input::Requested { from: node(3), token: 8, request: get });
    assert!(
        matches!(&out[..], [Output::Respond { token: 8, response: TaskResponse::Refused { check, .. } }] if check == "overloaded"),
        "past inbound_max: {out:?}"
    );
    let out = f.handle(Input::OwnerAnswered { token: 7, response: TaskResponse::NotFound });
    assert_eq!(out, vec![Output::Respond { token: 7, response: TaskResponse::NotFound }]);
    assert!(f.handle(Input::OwnerAnswered { token: 7, response: TaskResponse::NotFound }).is_empty());
}

#[test]
fn a_capsules_task_without_a_valid_grant_never_reaches_the_owner() {
    let mut f = Fixture::new(&[1, 2], ExchangeConfig::default());
    let mut submit = request("m1");
    let forged = Signed::sign(crate::grant::Grant::new("agent", 1, T0, T0.plus(1000)), &key(9)).unwrap();
    submit.sender = Sender::Capsule { name: "agent".into(), grant: forged.into_envelope() };
    submit.task = TaskId::placed(&node(2), &submit.sender, &submit.message);
    let out = f.handle(Input::Requested { from: node(2), token: 1, request: TaskRequest::Submit(submit) });
    assert!(
        matches!(&out[0], Output::RefusedHere { from, check, .. } if *from == node(2) && check.as_str() == "untrusted_issuer"),
        "{out:?}"
    );
    assert!(
        matches!(&out[1], Output::Respond { token: 1, response: TaskResponse::Refused { .. } }),
        "{out:?}"
    );
    assert_eq!(f.exchange.refusals().values().sum::<u64>(), 1);
}

#[test]
fn requests_in_flight_are_bounded() {
    let mut f = Fixture::new(&[2], ExchangeConfig { outbound_max: 1, ..ExchangeConfig::default() });
    f.submit("m1");
    let out = f.handle(Input::Ask {
        ask: 5,
        owner: node(2),
        request: TaskRequest::Get { task: request("m1").task },
    });
    assert!(matches!(&out[..], [Output::AskAnswered { ask: 5, answer: Err(_) }]), "{out:?}");
    let out = f.handle(Input::Submit { request: request("m2"), pin: None });
    assert!(matches!(&out[..], [Output::Placed { placement: Placement::Failed { .. }, .. }]), "{out:?}");
    assert_eq!(f.exchange.in_flight(), 1);
}

#[cfg(feature = "plant")]
#[test]
fn the_retry_lost_plant_sends_a_possibly_delivered_task_elsewhere() {
    let config = ExchangeConfig { plants: Plants::one(Plant::RetryLost), ..ExchangeConfig::default() };
    let mut f = Fixture::new(&[2, 3], config);
    let (_, id, first) = f.submit("m1");
    let out = f.handle(Input::Failed { id, failure: RequestFailure::Timeout, reason: "timeout".into() });
    assert!(matches!(&out[..], [Output::Send { peer, .. }] if *peer != first), "{out:?}");
}
