use super::*;
use crate::advert::Advert;
use crate::directory::{DirectoryConfig, Input, Source};
use crate::identity::SecretKey;
use crate::signed::Signed;

const T0: Millis = Millis(1_800_000_000_000);
const TTL_MS: u64 = 90_000;

fn key(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

fn node(n: u8) -> NodeId {
    key(n).node_id()
}

/// A directory where node `n` serves the models of its entry, at load `load`; an agent
/// named like the first model must not count as a model.
fn directory(adverts: &[(u8, u16, &[&str])]) -> Directory {
    let mut dir = Directory::new(DirectoryConfig::default());
    for (n, load, models) in adverts {
        let mut advert = Advert::new(1, T0, TTL_MS);
        advert.models = models.iter().map(|m| (*m).to_owned()).collect();
        advert.agents = vec!["agent-only".into()];
        advert.load = *load;
        let envelope = Signed::sign(advert, &key(*n)).unwrap().into_envelope();
        dir.handle(T0, Input::Advert { envelope, source: Source::Gossip { from: node(9), token: 0 } });
    }
    while dir.poll_output().is_some() {}
    dir
}

fn pick(
    dir: &Directory,
    now: Millis,
    local_serves: bool,
    model: &str,
    tried: &[NodeId],
    turn: u64,
) -> Vec<NodeId> {
    candidates(dir, now, node(5), local_serves, model, tried, &|_| Some(1), &|_| 0, turn)
}

#[test]
fn model_names_are_what_openai_clients_send() {
    for good in ["echo-model", "gpt-4o-mini", "meta/llama-3.1:8b", "m", "A_b.c"] {
        assert!(check_model_name(good).is_ok(), "{good}");
    }
    for bad in ["", "-lead", "with space", "ünïcode", &"x".repeat(MODEL_NAME_LEN_MAX + 1)] {
        assert!(check_model_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn this_node_comes_first_then_the_cheapest() {
    let dir = directory(&[(1, 900, &["echo-model"]), (2, 0, &["echo-model", "other"]), (3, 0, &["other"])]);
    assert_eq!(pick(&dir, T0, true, "echo-model", &[], 0), vec![node(5), node(2), node(1)]);
    assert_eq!(pick(&dir, T0, false, "echo-model", &[], 0), vec![node(2), node(1)], "load counts");
    assert!(pick(&dir, T0, false, "agent-only", &[], 0).is_empty(), "an agent is no model");
    assert!(pick(&dir, T0, false, "nobody", &[], 0).is_empty());
    // Expired adverts serve nothing.
    assert!(pick(&dir, T0.plus(TTL_MS + 1), false, "echo-model", &[], 0).is_empty());
}

#[test]
fn equally_cheap_nodes_take_turns_and_open_sessions_cost() {
    let dir = directory(&[(1, 0, &["m"]), (2, 0, &["m"]), (3, 0, &["m"])]);
    let firsts: std::collections::BTreeSet<NodeId> =
        (0..3).map(|turn| pick(&dir, T0, false, "m", &[], turn)[0]).collect();
    assert_eq!(firsts.len(), 3, "three turns, three different first choices");
    // The same turn, the same answer: the decision is a function of its inputs.
    assert_eq!(pick(&dir, T0, false, "m", &[], 7), pick(&dir, T0, false, "m", &[], 7));
    // Round trips a millisecond apart are as good as equal; far slower ones are not.
    let rtt = |n: &NodeId| {
        Some(if *n == node(1) {
            2
        } else if *n == node(3) {
            90
        } else {
            1
        })
    };
    let firsts: std::collections::BTreeSet<NodeId> =
        (0..4).map(|turn| candidates(&dir, T0, node(5), false, "m", &[], &rtt, &|_| 0, turn)[0]).collect();
    assert_eq!(firsts, [node(1), node(2)].into_iter().collect(), "node 3 is 90 ms away");
    // A node with sessions open costs more, whatever the turn.
    let busy = |n: &NodeId| if *n == node(1) || *n == node(2) { 3 } else { 0 };
    for turn in 0..3 {
        let ranked = candidates(&dir, T0, node(5), false, "m", &[], &|_| Some(1), &busy, turn);
        assert_eq!(ranked[0], node(3), "turn {turn}");
    }
}

#[test]
fn nodes_that_refused_are_not_tried_again() {
    let dir = directory(&[(1, 0, &["m"]), (2, 0, &["m"])]);
    let first = pick(&dir, T0, true, "m", &[], 0);
    assert_eq!(first[0], node(5));
    let after = pick(&dir, T0, true, "m", &[node(5), first[1]], 0);
    assert_eq!(after, vec![first[2]]);
    assert!(pick(&dir, T0, true, "m", &[node(5), node(1), node(2)], 0).is_empty());
}

#[test]
fn a_caller_must_be_a_member() {
    let dir = directory(&[(1, 0, &[])]);
    assert_eq!(check_caller(&dir, T0, &node(1)), Ok(()));
    assert_eq!(check_caller(&dir, T0, &node(2)), Err(ModelCheck::NotMember));
    assert_eq!(check_caller(&dir, T0.plus(TTL_MS + 1), &node(1)), Err(ModelCheck::NotMember));
}

fn request() -> ChatRequest {
    ChatRequest {
        tools: vec![ToolSpec {
            name: "lookup".into(),
            parameters: Some(r#"{"type":"object"}"#.into()),
            description: None,
        }],
        params: Some(r#"{"temperature":0.2}"#.into()),
        messages: vec![
            ChatMessage { role: "user".into(), content: Some("hi".into()), ..ChatMessage::default() },
            ChatMessage {
                role: "assistant".into(),
                tool_calls: vec![ToolCall { id: "c1".into(), name: "lookup".into(), arguments: "{}".into() }],
                ..ChatMessage::default()
            },
        ],
    }
}

#[test]
fn frames_round_trip_canonically() {
    let open = ModelOpen { model: "echo-model".into(), request: request() };
    let bytes = open.encode();
    crate::codec::tests::assert_canonical_key_order(&bytes);
    assert_eq!(ModelOpen::decode(&bytes).unwrap(), open);
    let delta = ChatDelta {
        usage: Some(Usage { total_tokens: 3, prompt_tokens: 1, completion_tokens: 2 }),
        content: Some("hel".into()),
        reasoning: None,
        tool_call: Some(ToolCallDelta {
            id: Some("c".into()),
            name: None,
            index: 0,
            arguments: Some("{".into()),
        }),
        finish_reason: Some("stop".into()),
    };
    for frame in [
        ModelFrame::Ready,
        ModelFrame::Accepted { session: "s-1".into() },
        ModelFrame::Refused { check: "busy".into(), reason: "full".into() },
        ModelFrame::Deltas(vec![delta.clone(), ChatDelta::default()]),
        ModelFrame::End { error: Some("the agent unsubscribed".into()) },
        ModelFrame::End { error: None },
    ] {
        let bytes = frame.encode();
        crate::codec::tests::assert_canonical_key_order(&bytes);
        assert_eq!(ModelFrame::decode(&bytes).unwrap(), frame);
    }
}

#[test]
fn hostile_frames_are_refused_by_name() {
    let mut open = ModelOpen { model: "bad name".into(), request: request() };
    assert!(ModelOpen::decode(&open.encode()).unwrap_err().to_string().contains("model"));
    open.model = "m".into();
    open.request.messages.clear();
    assert!(ModelOpen::decode(&open.encode()).unwrap_err().to_string().contains("messages"));
    open.request = request();
    open.request.messages[0].role = "root".into();
    assert!(ModelOpen::decode(&open.encode()).unwrap_err().to_string().contains("role"));
    let huge = ModelFrame::Deltas(vec![ChatDelta {
        content: Some("x".repeat(DELTA_TEXT_BYTES_MAX + 1)),
        ..ChatDelta::default()
    }]);
    assert!(ModelFrame::decode(&huge.encode()).unwrap_err().to_string().contains("deltas"));
    let big =
        ModelFrame::Deltas(vec![ChatDelta { content: Some("x".repeat(60_000)), ..ChatDelta::default() }; 5]);
    assert!(matches!(ModelFrame::decode(&big.encode()), Err(DecodeError::TooLarge { .. })));
    assert!(ModelFrame::decode(b"\xff\x00junk").is_err());
    assert!(ModelFrame::decode(&ModelFrame::Accepted { session: String::new() }.encode()).is_err());
}

#[test]
fn adverts_list_models_once_each_and_within_bounds() {
    let mut advert = Advert::new(1, T0, TTL_MS);
    advert.models = vec!["m".into(), "m".into()];
    assert!(Signed::sign(advert.clone(), &key(1)).unwrap_err().to_string().contains("twice"));
    advert.models = (0..=ADVERT_MODELS_MAX).map(|i| format!("m{i}")).collect();
    assert!(Signed::sign(advert.clone(), &key(1)).unwrap_err().to_string().contains("models"));
    advert.models = vec!["bad name".into()];
    assert!(Signed::sign(advert.clone(), &key(1)).is_err());
    // An advert without models encodes as before models existed.
    advert.models.clear();
    let bytes = Signed::sign(advert, &key(1)).unwrap().into_envelope().encode();
    assert!(!bytes.windows(6).any(|w| w == b"models"));
}
