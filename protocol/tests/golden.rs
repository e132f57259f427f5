//! Golden vectors freeze the wire format: the bytes of fixed documents signed with fixed
//! keys must never change by accident. After a deliberate format change (with a version
//! bump), regenerate with `MURMUR_BLESS=1 cargo test -p murmur-protocol --test golden`.

use std::path::PathBuf;

use murmur_protocol::directory::{DigestEntry, DirectoryDigest};
use murmur_protocol::*;

const T0: Millis = Millis(1_800_000_000_000);
const DAY_MS: u64 = 86_400_000;

fn authority() -> SecretKey {
    SecretKey::from_seed([0xa1; 32])
}

fn node_key() -> SecretKey {
    SecretKey::from_seed([0x11; 32])
}

fn cert() -> Envelope {
    Signed::sign(NodeCert::new(node_key().node_id(), 3, T0, T0.plus(365 * DAY_MS)), &authority())
        .unwrap()
        .into_envelope()
}

fn advert() -> Envelope {
    let mut advert = Advert::new(42, T0, 90_000);
    advert.load = 250;
    advert.addrs = vec!["/ip4/192.168.1.10/tcp/7421".into(), "/ip4/192.168.1.10/udp/7421/quic-v1".into()];
    advert.capsules = vec![
        HostedCapsule {
            name: "echo".into(),
            digest: Some(Digest::of(b"echo.wasm")),
            version: "0.1.0".into(),
        },
        HostedCapsule { name: "wordcount".into(), digest: None, version: "1.2.0".into() },
    ];
    advert.artifacts = vec![Digest::of(b"echo.wasm")];
    advert.cert = Some(cert());
    Signed::sign(advert, &node_key()).unwrap().into_envelope()
}

fn grant() -> Envelope {
    let mut grant = Grant::new("pipeline", 7, T0, T0.plus(30 * DAY_MS));
    grant.network = vec![
        "mesh://echo".parse().unwrap(),
        format!("mesh://wordcount@{}", node_key().node_id()).parse().unwrap(),
        "localhost:*".parse().unwrap(),
    ];
    grant.shell = vec!["/usr/bin/git".into()];
    grant.tools = vec!["wordcount".into(), "text-*".into()];
    grant.artifact = Some(Digest::of(b"pipeline.wasm"));
    Signed::sign(grant, &authority()).unwrap().into_envelope()
}

fn digest() -> DirectoryDigest {
    DirectoryDigest::from_entries(
        [1u8, 2, 3]
            .iter()
            .map(|n| DigestEntry(SecretKey::from_seed([*n; 32]).node_id(), u64::from(*n) * 1000))
            .collect(),
    )
}

fn check(name: &str, bytes: &[u8]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.hex"));
    let text: String = hex::encode(bytes)
        .as_bytes()
        .chunks(64)
        .map(|l| format!("{}\n", std::str::from_utf8(l).unwrap()))
        .collect();
    if std::env::var_os("MURMUR_BLESS").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(stored, text, "{name}: wire format changed; see this file's docs");
}

fn stored(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.hex"));
    let text: String = std::fs::read_to_string(path).unwrap().split_whitespace().collect();
    hex::decode(text).unwrap()
}

#[test]
fn advert_bytes_are_frozen() {
    check("advert", &advert().encode());
    let opened: Signed<Advert> = Envelope::decode(&stored("advert")).unwrap().open().unwrap();
    assert_eq!(opened.doc().seq, 42);
    assert_eq!(opened.doc().capsules[1].name, "wordcount");
    verify_cert(opened.doc().cert.clone().unwrap(), &[authority().public()], T0, &node_key().node_id())
        .unwrap();
}

#[test]
fn grant_bytes_are_frozen() {
    check("grant", &grant().encode());
    let env = Envelope::decode(&stored("grant")).unwrap();
    let verified = verify_grant(
        env,
        &[authority().public()],
        T0,
        GrantExpectation { capsule: Some("pipeline"), artifact: Some(&Digest::of(b"pipeline.wasm")) },
    )
    .unwrap();
    assert!(verified.doc().allows_target(&"localhost:8080".parse().unwrap()));
}

#[test]
fn node_cert_bytes_are_frozen() {
    check("node_cert", &cert().encode());
    Envelope::decode(&stored("node_cert")).unwrap().open::<NodeCert>().unwrap();
}

#[test]
fn digest_bytes_are_frozen() {
    check("directory_digest", &digest().encode());
    assert_eq!(DirectoryDigest::decode(&stored("directory_digest")).unwrap(), digest());
}

#[test]
fn sync_bytes_are_frozen() {
    let request = murmur_protocol::sync::SyncRequest::new(Some(cert()), digest());
    check("sync_request", &request.encode());
    assert_eq!(murmur_protocol::sync::SyncRequest::decode(&stored("sync_request")).unwrap(), request);
    let response = murmur_protocol::sync::SyncResponse::new(vec![advert()], true);
    check("sync_response", &response.encode());
    assert_eq!(murmur_protocol::sync::SyncResponse::decode(&stored("sync_response")).unwrap(), response);
    // With departure notices: the `gone` key appears only then, so the response above
    // keeps the bytes it had before notices existed.
    let response = response.with_notices(vec![departure()]);
    check("sync_response_gone", &response.encode());
    assert_eq!(murmur_protocol::sync::SyncResponse::decode(&stored("sync_response_gone")).unwrap(), response);
}

#[test]
fn summary_sync_bytes_are_frozen() {
    use murmur_protocol::sync::{BucketSum, Buckets, Scope, SyncRequest, SyncResponse};
    // The keyed hash is part of the format: both ends must sum the same way.
    let buckets = Buckets::new(0x5eed, 4);
    let entries = digest().entries().iter().map(|e| (e.0, e.1)).collect::<Vec<_>>();
    let summary = buckets.summarize(entries);
    let request = SyncRequest::summarized(Some(cert()), summary);
    check("sync_request_summary", &request.encode());
    assert_eq!(SyncRequest::decode(&stored("sync_request_summary")).unwrap(), request);
    let request = SyncRequest::scoped(None, Scope::new(buckets, vec![1, 3]), digest());
    check("sync_request_scoped", &request.encode());
    assert_eq!(SyncRequest::decode(&stored("sync_request_scoped")).unwrap(), request);
    let response = SyncResponse::differing(vec![BucketSum(1, 0x0123_4567_89ab_cdef)], vec![advert()]);
    check("sync_response_differ", &response.encode());
    assert_eq!(SyncResponse::decode(&stored("sync_response_differ")).unwrap(), response);
}

fn departure() -> Envelope {
    let witness = SecretKey::from_seed([0x22; 32]);
    // It names the advert above (seq 42) by that advert's signature.
    let named = *advert().signature();
    Signed::sign(departure::Departure::new(node_key().node_id(), 42, named, T0.plus(60_000)), &witness)
        .unwrap()
        .into_envelope()
}

#[test]
fn departure_notice_bytes_are_frozen() {
    check("departure", &departure().encode());
    let opened: Signed<departure::Departure> =
        Envelope::decode(&stored("departure")).unwrap().open().unwrap();
    assert_eq!((opened.doc().node, opened.doc().seq), (node_key().node_id(), 42));
}

fn submit() -> task::Submit {
    task::Submit {
        task: task::TaskId::derive("12D3KooW/relay", "m-1"),
        text: "count these words".into(),
        sender: task::Sender::Capsule { name: "pipeline".into(), grant: grant() },
        capsule: "wordcount".into(),
        context: Some("ctx-1".into()),
        message: "m-1".into(),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        settle_wait_ms: 0,
    }
}

fn snapshot() -> task::TaskSnapshot {
    task::TaskSnapshot {
        seq: 3,
        task: task::TaskId::derive("client@x", "m-2"),
        state: task::TaskState::Completed,
        capsule: "wordcount".into(),
        context: "ctx-2".into(),
        message: Some("{\"words\":3}".into()),
    }
}

#[test]
fn task_bytes_are_frozen() {
    use murmur_protocol::task::{TaskEvent, TaskRequest, TaskResponse, TaskState};
    let requests = [
        ("task_submit", TaskRequest::Submit(submit())),
        (
            "task_events",
            TaskRequest::Events { task: snapshot().task, after: 2, wait_ms: 5000, settled: true },
        ),
        ("task_reply", TaskRequest::Reply { task: snapshot().task, text: "main".into() }),
    ];
    for (name, request) in requests {
        check(name, &request.encode());
        assert_eq!(TaskRequest::decode(&stored(name)).unwrap(), request);
    }
    let responses = [
        ("task_accepted", TaskResponse::Accepted(snapshot())),
        (
            "task_refused",
            TaskResponse::Refused { check: "untrusted_issuer".into(), reason: "issuer not trusted".into() },
        ),
        (
            "task_events_answer",
            TaskResponse::Events {
                events: vec![
                    TaskEvent { seq: 2, text: None, state: TaskState::Working },
                    TaskEvent { seq: 3, text: Some("{\"words\":3}".into()), state: TaskState::Completed },
                ],
                snapshot: snapshot(),
                gap: false,
            },
        ),
    ];
    for (name, response) in responses {
        check(name, &response.encode());
        assert_eq!(TaskResponse::decode(&stored(name)).unwrap(), response);
    }
}

#[test]
fn agent_bytes_are_frozen() {
    use murmur_protocol::agent::{AgentMessage, AgentRequest, AgentResponse};
    // An advert with agents: the `agents` key appears only then, so adverts without any
    // keep the bytes they had before agents existed (`advert` above).
    let mut with_agents: Advert = advert().open::<Advert>().unwrap().doc().clone();
    with_agents.agents = vec!["planner".into(), "writer".into()];
    let envelope = Signed::sign(with_agents, &node_key()).unwrap().into_envelope();
    check("advert_agents", &envelope.encode());
    let opened: Signed<Advert> = Envelope::decode(&stored("advert_agents")).unwrap().open().unwrap();
    assert!(opened.doc().runs_agent("writer"));
    let request = AgentRequest::Message(AgentMessage {
        to: "writer".into(),
        from: "planner".into(),
        text: "draft the summary".into(),
    });
    check("agent_message", &request.encode());
    assert_eq!(AgentRequest::decode(&stored("agent_message")).unwrap(), request);
    let refused =
        AgentResponse::Refused { check: "inbox_full".into(), reason: "writer's inbox is full".into() };
    check("agent_refused", &refused.encode());
    assert_eq!(AgentResponse::decode(&stored("agent_refused")).unwrap(), refused);
}
