//! The unauthorized sender: a byzantine node that puts tasks straight onto the wire,
//! skipping the sending node's grant check, each with one flaw the owner's check must
//! catch (see [`Attack`]). It hosts a capsule of its own, `rogue-N`, for which the
//! authority did issue a grant (allowing one service) and, earlier, one that has expired.

use murmur_protocol::grant::Grant;
use murmur_protocol::task::{Sender, Submit, TaskId};
use murmur_protocol::{Advert, Envelope, Signed};
use std::collections::BTreeSet;

use super::tasks::{Service, TaskModel};
use super::{EPOCH, Ix, Sim};
use crate::check::Attack;

const DAY_MS: u64 = 86_400_000;

/// What one unauthorized sender holds.
#[derive(Debug)]
pub(super) struct Kit {
    /// Its own capsule, `rogue-N`.
    capsule: String,
    /// Genuine, for `capsule`, allowing `task-0` only.
    valid: Envelope,
    /// Genuine, for `capsule`, expired a day before the run.
    expired: Envelope,
    /// Signed by its own key, which nobody trusts.
    untrusted: Envelope,
    /// Claims the authority as signer; signed by its own key.
    forged: Envelope,
    /// Not a grant at all: its own signed advert in the grant's place.
    not_a_grant: Envelope,
    sent: u64,
}

impl Sim {
    /// Gives a new unauthorized sender its capsule and its grants (before it starts, so
    /// its first advert lists the capsule).
    pub(super) fn equip_unauthorized(&mut self, ix: Ix) {
        let capsule = format!("rogue-{ix}");
        self.add_capsule(ix, &capsule, false);
        let key = self.nodes[ix as usize].key.clone();
        let Some(model) = self.tasks.as_deref_mut() else { return };
        model.oracle.hosts_sender(&capsule, ix);
        let allowed: BTreeSet<String> = ["task-0".to_owned()].into();
        let serial = 1_000_000 + u64::from(ix);
        let valid = model.issue(&capsule, serial, &allowed, EPOCH.minus(DAY_MS), EPOCH.plus(30 * DAY_MS));
        let expired = model.issue(&capsule, serial, &allowed, EPOCH.minus(30 * DAY_MS), EPOCH.minus(DAY_MS));
        let mut own = Grant::new(capsule.clone(), serial, EPOCH.minus(DAY_MS), EPOCH.plus(30 * DAY_MS));
        own.network = vec!["mesh://task-*".parse().expect("a valid pattern")];
        let untrusted = Signed::sign(own, &key).expect("a valid grant signs").into_envelope();
        let authority = *model.authorities[0].as_bytes();
        let forged =
            super::byzantine::with_signer(&untrusted, &authority).unwrap_or_else(|| untrusted.clone());
        let not_a_grant =
            Signed::sign(Advert::new(1, EPOCH, 90_000), &key).expect("an empty advert signs").into_envelope();
        model.kits.insert(ix, Kit { capsule, valid, expired, untrusted, forged, not_a_grant, sent: 0 });
    }

    /// Sends the next flawed task to a live host of a service. False if nothing was sent.
    pub(super) fn send_unauthorized(&mut self, ix: Ix) -> bool {
        let id = self.nodes[ix as usize].id;
        let live: Vec<bool> = self.nodes.iter().map(super::Node::alive).collect();
        let Some(model) = self.tasks.as_deref_mut() else { return false };
        let Some(kit) = model.kits.get_mut(&ix) else { return false };
        let attack = Attack::ALL[(kit.sent % Attack::ALL.len() as u64) as usize];
        kit.sent += 1;
        let n = kit.sent;
        let Some((claimed, grant, services)) = flaw(model, ix, attack) else { return false };
        let rng = &mut self.nodes[ix as usize].rng;
        let service = services[rng.below(services.len() as u64) as usize];
        let hosts: Vec<Ix> = hosts_alive(&model.services[service], &live, ix);
        if hosts.is_empty() {
            return false;
        }
        let host = hosts[rng.below(hosts.len() as u64) as usize];
        let message = format!("rogue-{n}");
        let sender = Sender::Capsule { name: claimed, grant };
        let task = match attack {
            // The id the host will give its own client's message of that id.
            Attack::SquatTaskId => TaskId::placed(&self.nodes[host as usize].id, &Sender::Client, &message),
            _ => TaskId::placed(&id, &sender, &message),
        };
        let request = Submit {
            task,
            text: "let me in".into(),
            sender,
            capsule: model.services[service].name.clone(),
            context: None,
            message,
            traceparent: None,
            settle_wait_ms: 0,
        };
        model.oracle.attack_sent(request.task, attack);
        if let Sender::Capsule { grant, .. } = &request.sender {
            self.revocation_task_sent(request.task, grant, None);
        }
        let provider = self.nodes[host as usize].id;
        self.send_attack(ix, provider, request, attack);
        true
    }
}

/// The claimed capsule, the grant, and the services to aim at, for one flaw.
fn flaw(model: &TaskModel, ix: Ix, attack: Attack) -> Option<(String, Envelope, Vec<usize>)> {
    let kit = model.kits.get(&ix)?;
    let all: Vec<usize> = (0..model.services.len()).collect();
    let own = kit.capsule.clone();
    let agent = model.agents.get(ix as usize % model.agents.len().max(1));
    Some(match attack {
        Attack::NoGrant => (own, kit.not_a_grant.clone(), all),
        Attack::Untrusted => (own, kit.untrusted.clone(), all),
        Attack::ForgedSignature => (own, kit.forged.clone(), all),
        Attack::Expired => (own, kit.expired.clone(), vec![0]),
        Attack::OtherCapsule => {
            (agent.map_or_else(|| "agent-0".to_owned(), |a| a.name.clone()), kit.valid.clone(), all)
        }
        Attack::Stolen => {
            let agent = agent?;
            (agent.name.clone(), agent.grant.clone(), agent.targets.iter().copied().collect())
        }
        Attack::SquatTaskId => (own, kit.valid.clone(), vec![0]),
        Attack::OutsideTarget => (own, kit.valid.clone(), (1..model.services.len()).collect()),
    })
}

fn hosts_alive(service: &Service, live: &[bool], me: Ix) -> Vec<Ix> {
    service
        .hosts
        .iter()
        .copied()
        .filter(|h| *h != me && live.get(*h as usize).copied().unwrap_or(false))
        .collect()
}
