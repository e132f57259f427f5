//! The task oracle: ground truth about grants, acceptances and executions, and the task
//! checks built on it.
//!
//! Safety, checked as events happen:
//! - **grants**: a task a capsule sent is accepted only if it carries, byte for byte, a
//!   grant the scenario's authority issued, for that capsule, valid at the owner's clock,
//!   listing the target service, and the sending node really hosts that capsule. The truth
//!   is kept as plain names, not re-derived with the protocol's matching code;
//! - **at most once**: a task starts running once, counted over every node and across
//!   crashes;
//! - **no accepted task lost**: every task an owner accepted is in its durable store after
//!   every restart and at the end; task states only move forward;
//! - **sending-side check**: an agent's send is refused before it leaves exactly when the
//!   target is outside its grant;
//! - **byzantine sends**: each unauthorized task that reaches an owner is refused with the
//!   check its flaw calls for.
//!
//! Liveness, once faults have ended and submissions stopped: every accepted task whose
//! owner is alive reaches a terminal state, and every submission at a node that stayed up
//! gets an outcome, within the scenario's bound.

use std::collections::{BTreeMap, BTreeSet};

use murmur_protocol::task::{Sender, Submit, TaskId, TaskState};
use murmur_protocol::{Envelope, Millis};

/// What the authority really granted.
#[derive(Clone, Debug)]
pub struct GrantTruth {
    pub capsule: String,
    /// Services the grant allows (`mesh://NAME`).
    pub targets: BTreeSet<String>,
    pub not_before: Millis,
    pub not_after: Millis,
}

/// The flaws an unauthorized sender's tasks carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attack {
    /// No grant: the grant slot holds a signed document of another kind.
    NoGrant,
    /// A grant signed by a key no node trusts.
    Untrusted,
    /// A grant claiming the trusted authority as signer, signed by another key.
    ForgedSignature,
    /// A genuine grant whose validity ended.
    Expired,
    /// A genuine grant for the sender's own capsule, presented for another capsule.
    OtherCapsule,
    /// Another node's genuine grant, for a capsule the sender does not host.
    Stolen,
    /// The sender's own genuine grant, to a service it lists, under a task id derived for
    /// another node (squatting the id that node will give its client's message).
    SquatTaskId,
    /// The sender's own genuine grant, to a service it does not list.
    OutsideTarget,
}

impl Attack {
    /// Every flaw, in the order an unauthorized sender cycles through them.
    pub const ALL: [Self; 8] = [
        Self::NoGrant,
        Self::Untrusted,
        Self::ForgedSignature,
        Self::Expired,
        Self::OtherCapsule,
        Self::Stolen,
        Self::SquatTaskId,
        Self::OutsideTarget,
    ];

    /// A short name for reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::NoGrant => "no_grant",
            Self::Untrusted => "untrusted_grant",
            Self::ForgedSignature => "forged_signature",
            Self::Expired => "expired_grant",
            Self::OtherCapsule => "grant_for_other_capsule",
            Self::Stolen => "stolen_grant",
            Self::SquatTaskId => "squatted_task_id",
            Self::OutsideTarget => "target_outside_grant",
        }
    }

    /// The refusal checks an owner may answer with, the intended one first.
    /// `target_outside_grant` carries a genuine grant, so an owner that has not yet
    /// heard the sender's advert refuses it one step earlier, as `sender_not_hosted`.
    #[must_use]
    pub const fn expected_checks(self) -> &'static [&'static str] {
        match self {
            Self::NoGrant => &["wrong_kind"],
            Self::Untrusted => &["untrusted_issuer"],
            Self::ForgedSignature => &["bad_signature"],
            Self::Expired => &["expired"],
            Self::OtherCapsule => &["wrong_capsule"],
            Self::Stolen => &["sender_not_hosted"],
            Self::SquatTaskId => &["foreign_task_id"],
            Self::OutsideTarget => &["target_not_allowed", "sender_not_hosted"],
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|a| *a == self).unwrap_or(0)
    }
}

/// Per flaw: unauthorized tasks sent, delivered to an owner, and refused as expected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttackCount {
    pub sent: u64,
    pub delivered: u64,
    /// Refused with the flaw's intended check (the first of `expected_checks`).
    pub refused_intended: u64,
    pub refused: u64,
}

#[derive(Debug)]
struct TaskTruth {
    /// Nodes that accepted the task (one, unless something is wrong).
    owners: Vec<u32>,
    state: TaskState,
    /// Nodes that started running it, with when.
    started: Vec<(u32, u64)>,
}

/// Ground truth about tasks.
#[derive(Debug, Default)]
pub struct TaskOracle {
    /// Grant envelope bytes → what the authority granted.
    grants: BTreeMap<Vec<u8>, GrantTruth>,
    /// Sender capsule → nodes that really host it.
    senders: BTreeMap<String, BTreeSet<u32>>,
    tasks: BTreeMap<TaskId, TaskTruth>,
    /// Owner → tasks it accepted.
    by_owner: BTreeMap<u32, BTreeSet<TaskId>>,
    /// Owners that left for good, taking their disks: their tasks are excused.
    gone: BTreeSet<u32>,
    /// (entry node, task) → when submitted, until the router gives an outcome.
    submissions: BTreeMap<(u32, TaskId), u64>,
    attacks: BTreeMap<TaskId, Attack>,
    attack_counts: [AttackCount; 8],
    executions: u64,
}

fn short(task: &TaskId) -> String {
    task.to_string()[..8].to_owned()
}

impl TaskOracle {
    /// Records a grant the authority issued.
    pub fn issued(&mut self, grant: &Envelope, truth: GrantTruth) {
        self.grants.insert(grant.encode(), truth);
    }

    /// Records that `node` really hosts sender capsule `capsule`.
    pub fn hosts_sender(&mut self, capsule: &str, node: u32) {
        self.senders.entry(capsule.to_owned()).or_default().insert(node);
    }

    /// Checks the sending node's decision on an agent's send to `target`.
    pub fn outgoing(&self, agent: &str, grant: &Envelope, target: &str, allowed: bool) -> Result<(), String> {
        let granted = self.grants.get(&grant.encode()).is_some_and(|g| g.targets.contains(target));
        match (granted, allowed) {
            (true, false) => {
                Err(format!("the sending node's check refused {agent} → {target}, which its grant allows"))
            }
            (false, true) => {
                Err(format!("the sending node's check let {agent} send to {target}, outside its grant"))
            }
            _ => Ok(()),
        }
    }

    /// Checks and records an acceptance of `submit` by `owner`, delivered from node `from`
    /// (the owner itself for a local delivery), judged at the owner's clock.
    pub fn accepted(
        &mut self,
        owner: u32,
        from: u32,
        submit: &Submit,
        owner_now: Millis,
    ) -> Result<(), String> {
        let task = submit.task;
        let truth = self.tasks.entry(task).or_insert_with(|| TaskTruth {
            owners: Vec::new(),
            state: TaskState::Submitted,
            started: Vec::new(),
        });
        if !truth.owners.contains(&owner) {
            truth.owners.push(owner);
        }
        self.by_owner.entry(owner).or_default().insert(task);
        let Sender::Capsule { name, grant } = &submit.sender else { return Ok(()) };
        let what = format!(
            "node {owner} accepted task {} for {} from capsule {name} on node {from}",
            short(&task),
            submit.capsule
        );
        let Some(granted) = self.grants.get(&grant.encode()) else {
            return Err(format!("{what} carrying a grant the authority never issued"));
        };
        if granted.capsule != *name {
            return Err(format!("{what} under a grant issued for {}", granted.capsule));
        }
        if owner_now < granted.not_before || owner_now >= granted.not_after {
            return Err(format!(
                "{what} under a grant valid only in [{}, {}) (owner clock {})",
                granted.not_before.0, granted.not_after.0, owner_now.0
            ));
        }
        if !self.senders.get(name).is_some_and(|hosts| hosts.contains(&from)) {
            return Err(format!("{what}, a capsule node {from} does not host"));
        }
        if !granted.targets.contains(&submit.capsule) {
            return Err(format!("{what}, a target its grant does not list"));
        }
        Ok(())
    }

    /// Records that `owner` started running `task` (a task starts at most once anywhere).
    pub fn started(&mut self, owner: u32, task: &TaskId, at: u64) -> Result<(), String> {
        self.executions += 1;
        let Some(truth) = self.tasks.get_mut(task) else {
            return Err(format!("node {owner} ran task {}, which nobody accepted", short(task)));
        };
        if !truth.owners.contains(&owner) {
            return Err(format!("node {owner} ran task {}, which it never accepted", short(task)));
        }
        let before = truth.started.first().copied();
        truth.started.push((owner, at));
        if let Some((first, first_at)) = before {
            return Err(format!(
                "task {} executed twice: node {owner} started it at {at} ms after node {first} started it at {first_at} ms",
                short(task)
            ));
        }
        if truth.state.is_terminal() {
            return Err(format!("node {owner} ran task {} after it was {}", short(task), truth.state));
        }
        truth.state = TaskState::Working;
        Ok(())
    }

    /// Records that `task` reached terminal `state` at `owner`.
    pub fn finished(&mut self, owner: u32, task: &TaskId, state: TaskState) -> Result<(), String> {
        let Some(truth) = self.tasks.get_mut(task) else {
            return Err(format!("node {owner} finished task {}, which nobody accepted", short(task)));
        };
        if truth.state.is_terminal() {
            return Err(format!(
                "task {} went from {} to {state} at node {owner}: a terminal state changed",
                short(task),
                truth.state
            ));
        }
        truth.state = state;
        Ok(())
    }

    /// Checks that `owner`'s durable store, after a restart or at the end, still holds every
    /// task it accepted.
    pub fn check_store(&self, owner: u32, holds: &dyn Fn(&TaskId) -> bool) -> Result<(), String> {
        let Some(accepted) = self.by_owner.get(&owner) else { return Ok(()) };
        match accepted.iter().find(|t| !holds(t)) {
            Some(task) => Err(format!(
                "node {owner} accepted task {} but its store no longer holds it: an accepted task was lost",
                short(task)
            )),
            None => Ok(()),
        }
    }

    /// `owner` left for good with its disk.
    pub fn owner_gone(&mut self, owner: u32) {
        self.gone.insert(owner);
    }

    /// A submission entered the router of `node`.
    pub fn submitted(&mut self, node: u32, task: TaskId, at: u64) {
        self.submissions.entry((node, task)).or_insert(at);
    }

    /// The router of `node` gave `task` an outcome.
    pub fn resolved(&mut self, node: u32, task: &TaskId) {
        self.submissions.remove(&(node, *task));
    }

    /// `node` crashed: its router, and the submissions waiting in it, are gone.
    pub fn forget_submissions(&mut self, node: u32) {
        self.submissions.retain(|(n, _), _| *n != node);
    }

    /// An unauthorized task was sent.
    pub fn attack_sent(&mut self, task: TaskId, attack: Attack) {
        self.attacks.insert(task, attack);
        self.attack_counts[attack.index()].sent += 1;
    }

    /// A task reached an owner's checks.
    pub fn delivered(&mut self, task: &TaskId) {
        if let Some(attack) = self.attacks.get(task) {
            self.attack_counts[attack.index()].delivered += 1;
        }
    }

    /// An owner refused `task` with `check`: right for an unauthorized task only if its
    /// flaw calls for that check.
    pub fn refused(&mut self, owner: u32, task: &TaskId, check: &str) -> Result<(), String> {
        let Some(&attack) = self.attacks.get(task) else { return Ok(()) };
        let expected = attack.expected_checks();
        if !expected.contains(&check) {
            return Err(format!(
                "node {owner} refused an unauthorized task ({}) with check {check}, expected {}",
                attack.name(),
                expected.join(" or ")
            ));
        }
        let count = &mut self.attack_counts[attack.index()];
        count.refused += 1;
        if check == expected[0] {
            count.refused_intended += 1;
        }
        Ok(())
    }

    /// An owner refused `task` as revoked (the revocation oracle judged that refusal): for
    /// an unauthorized task (a stolen grant that was then revoked) it counts as refused,
    /// not as its flaw's intended check.
    pub fn refused_as_revoked(&mut self, task: &TaskId) {
        if let Some(&attack) = self.attacks.get(task) {
            self.attack_counts[attack.index()].refused += 1;
        }
    }

    /// Whether `task` was sent by an unauthorized sender.
    #[must_use]
    pub fn is_attack(&self, task: &TaskId) -> bool {
        self.attacks.contains_key(task)
    }

    /// Per flaw, in [`Attack::ALL`] order.
    #[must_use]
    pub const fn attack_counts(&self) -> &[AttackCount; 8] {
        &self.attack_counts
    }

    /// What still stands between now and settled task traffic, if anything: an accepted
    /// task of a live owner that is not terminal, or a submission at a live node without an
    /// outcome.
    pub fn unsettled(&self, alive: &dyn Fn(u32) -> bool) -> Option<String> {
        for (task, truth) in &self.tasks {
            if truth.state.is_terminal() {
                continue;
            }
            if let Some(&owner) = truth.owners.iter().find(|o| alive(**o) && !self.gone.contains(o)) {
                return Some(format!(
                    "task {} accepted by node {owner} is still {}",
                    short(task),
                    truth.state
                ));
            }
        }
        self.submissions.iter().find(|((node, _), _)| alive(*node)).map(|((node, task), at)| {
            format!("task {} submitted at node {node} at {at} ms has no outcome from its router", short(task))
        })
    }

    /// Tasks accepted, terminal, and accepted by owners that left for good and not finished.
    #[must_use]
    pub fn totals(&self) -> (u64, u64, u64) {
        let accepted = self.tasks.len() as u64;
        let terminal = self.tasks.values().filter(|t| t.state.is_terminal()).count() as u64;
        let orphaned = self
            .tasks
            .values()
            .filter(|t| !t.state.is_terminal() && t.owners.iter().all(|o| self.gone.contains(o)))
            .count() as u64;
        (accepted, terminal, orphaned)
    }

    /// Task starts counted.
    #[must_use]
    pub const fn executions(&self) -> u64 {
        self.executions
    }

    /// Owners in order, for end-of-run store checks.
    pub fn owners(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_owner.keys().copied().filter(|o| !self.gone.contains(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::grant::Grant;
    use murmur_protocol::{SecretKey, Signed};

    const T0: Millis = Millis(1_800_000_000_000);

    fn grant(key: &SecretKey, capsule: &str) -> Envelope {
        let mut grant = Grant::new(capsule, 1, T0.minus(1000), T0.plus(1000));
        grant.network.push("mesh://task-1".parse().unwrap());
        Signed::sign(grant, key).unwrap().into_envelope()
    }

    fn submit(sender: Sender, capsule: &str, message: &str) -> Submit {
        Submit {
            task: TaskId::derive("o", message),
            text: "x".into(),
            sender,
            capsule: capsule.into(),
            context: None,
            message: message.into(),
            traceparent: None,
            settle_wait_ms: 0,
        }
    }

    fn oracle(authority: &SecretKey) -> (TaskOracle, Envelope) {
        let mut oracle = TaskOracle::default();
        let genuine = grant(authority, "agent-0");
        oracle.issued(
            &genuine,
            GrantTruth {
                capsule: "agent-0".into(),
                targets: ["task-1".to_owned()].into(),
                not_before: T0.minus(1000),
                not_after: T0.plus(1000),
            },
        );
        oracle.hosts_sender("agent-0", 3);
        (oracle, genuine)
    }

    #[test]
    fn the_grant_check_names_each_unauthorized_acceptance() {
        let authority = SecretKey::from_seed([1; 32]);
        let (mut oracle, genuine) = oracle(&authority);
        let ok = Sender::Capsule { name: "agent-0".into(), grant: genuine.clone() };
        oracle.accepted(5, 3, &submit(ok.clone(), "task-1", "a"), T0).unwrap();
        oracle.accepted(5, 3, &submit(Sender::Client, "task-2", "b"), T0).unwrap();
        let forged = Sender::Capsule {
            name: "agent-0".into(),
            grant: grant(&SecretKey::from_seed([2; 32]), "agent-0"),
        };
        let cases = [
            (submit(forged, "task-1", "c"), 3, T0, "never issued"),
            (submit(ok.clone(), "task-2", "d"), 3, T0, "does not list"),
            (submit(ok.clone(), "task-1", "e"), 4, T0, "does not host"),
            (submit(ok.clone(), "task-1", "f"), 3, T0.plus(1000), "valid only"),
            (
                submit(Sender::Capsule { name: "agent-1".into(), grant: genuine }, "task-1", "g"),
                3,
                T0,
                "issued for agent-0",
            ),
        ];
        for (request, from, now, needle) in cases {
            let err = oracle.accepted(5, from, &request, now).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn a_second_start_anywhere_is_a_violation_and_terminal_states_stay() {
        let (mut oracle, _) = oracle(&SecretKey::from_seed([1; 32]));
        let request = submit(Sender::Client, "task-1", "a");
        oracle.accepted(5, 5, &request, T0).unwrap();
        oracle.started(5, &request.task, 10).unwrap();
        oracle.accepted(6, 6, &request, T0).unwrap();
        let err = oracle.started(6, &request.task, 20).unwrap_err();
        assert!(err.contains("executed twice"), "{err}");
        oracle.finished(6, &request.task, TaskState::Completed).unwrap();
        assert!(oracle.finished(5, &request.task, TaskState::Failed).is_err());
    }

    #[test]
    fn a_store_missing_an_accepted_task_is_a_loss_and_liveness_waits_for_terminal() {
        let (mut oracle, _) = oracle(&SecretKey::from_seed([1; 32]));
        let request = submit(Sender::Client, "task-1", "a");
        oracle.accepted(5, 5, &request, T0).unwrap();
        assert!(oracle.check_store(5, &|_| true).is_ok());
        assert!(oracle.check_store(5, &|_| false).unwrap_err().contains("lost"));
        assert!(oracle.unsettled(&|_| true).is_some());
        assert!(oracle.unsettled(&|n| n != 5).is_none(), "a dead owner's tasks wait for its return");
        oracle.finished(5, &request.task, TaskState::Completed).unwrap();
        oracle.submitted(2, request.task, 0);
        assert!(oracle.unsettled(&|_| true).unwrap().contains("no outcome"));
        oracle.resolved(2, &request.task);
        assert!(oracle.unsettled(&|_| true).is_none());
    }

    #[test]
    fn unauthorized_tasks_must_be_refused_with_their_check() {
        let (mut oracle, _) = oracle(&SecretKey::from_seed([1; 32]));
        let task = TaskId::derive("rogue", "1");
        oracle.attack_sent(task, Attack::Expired);
        oracle.delivered(&task);
        assert!(oracle.refused(5, &task, "untrusted_issuer").is_err());
        oracle.refused(5, &task, "expired").unwrap();
        let count = oracle.attack_counts()[Attack::Expired.index()];
        assert_eq!((count.sent, count.delivered, count.refused_intended), (1, 1, 1));
    }
}
