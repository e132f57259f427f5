//! The run options: how a run is set up besides its scenario (the seed, the canary, the
//! uncached verifier baseline), and the bugs a run can plant on purpose, with their names
//! on the command line and how each reaches the protocol's machines. The world reads these
//! when it sets a run up, and the report repeats the seed and the canary beside the verdict.

/// How a run is set up besides its scenario.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    pub seed: u64,
    /// Plant the known bug (signature checks skipped) and a forger to exploit it.
    pub canary: bool,
    /// Verify every signature in every node, without the shared cache (the naive baseline
    /// the benchmark compares against).
    pub uncached: bool,
    /// Plant a known task bug that a task checker must catch.
    pub plant: Option<Plant>,
}

impl Options {
    /// The planted bug as the protocol's machines take it: the task and pull bugs are
    /// switches in the shipped code (`murmur_protocol::plant`); the others are
    /// configurations the world sets up.
    #[must_use]
    pub const fn plants(&self) -> murmur_protocol::plant::Plants {
        use murmur_protocol::plant::{Plant as Shipped, Plants};
        match self.plant {
            Some(Plant::SkipIncomingCheck) => Plants::one(Shipped::SkipIncomingCheck),
            Some(Plant::RetryLost) => Plants::one(Shipped::RetryLost),
            Some(Plant::VolatileAccept) => Plants::one(Shipped::VolatileAccept),
            Some(Plant::WriteUnverified) => Plants::one(Shipped::WriteUnverified),
            Some(Plant::RefuseWhenFull) => Plants::one(Shipped::RefuseWhenFull),
            Some(Plant::IgnoreRevocations) => Plants::one(Shipped::IgnoreRevocations),
            Some(
                Plant::TrustAnyOffer
                | Plant::OpenAdmission
                | Plant::RouteIgnoresDirectory
                | Plant::NoFailover
                | Plant::NoSpread
                | Plant::RetryAfterAccept
                | Plant::Panic,
            )
            | None => Plants::NONE,
        }
    }
}

/// A known bug, planted on purpose: each must be caught by its checker
/// (`sim/tests/tasks.rs`, `sim/tests/artifacts.rs`, `sim/tests/scenarios.rs`,
/// `sim/tests/revocations.rs`, `sim/tests/models.rs`). The task, pull, directory and
/// revocation bugs are planted in the protocol's own machines (the code `murnode` runs);
/// `trust-any-offer` and `open-admission` are configurations a node could be given; the
/// model bugs are planted in the simulator's model of `murnode`'s model router
/// (`node/src/models.rs`, which calls the protocol's `model::candidates`), and need a
/// scenario with a `[models]` section. `panic` stands in for any protocol code that
/// panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The task exchange accepts peers' tasks without the receiving node's grant check
    /// (`check_incoming`). Caught by the grant checker (an unauthorized sender is added if
    /// the scenario has none).
    SkipIncomingCheck,
    /// The task exchange takes a delivery with an unknown outcome (timeout, connection
    /// closed) as "not delivered", so the router tries another node although the first may
    /// have accepted. Caught by the executed-twice checker.
    RetryLost,
    /// The owner machine answers "accepted" before the acceptance is on disk (written in
    /// the background, so only a later synchronous write makes it durable). Caught by the
    /// lost-task checker when an owner restarts.
    VolatileAccept,
    /// The pull scheduler writes every bad chunk that arrives before checking it. Caught by
    /// the artifact write checker (a corrupt provider is added if the scenario has none, and
    /// artifact traffic if it has none).
    WriteUnverified,
    /// Resolutions trust the corrupt providers' own key as well as the publisher's, so a
    /// forged manifest can be taken. Caught by the resolution checker (a corrupt provider is
    /// added if the scenario has none, and artifact traffic if it has none).
    TrustAnyOffer,
    /// Nodes of a closed mesh admit every peer and advert, certified or not. Caught by the
    /// admission checker (the scenario is made closed, with an uncertified node, if it is
    /// not).
    OpenAdmission,
    /// A full directory refuses every newcomer and bounds no address range or peer (the
    /// directory before it made room by freshness). Caught by the liveness checker in the
    /// `sybil` scenario: the joins made while the flood fills directories never get in.
    RefuseWhenFull,
    /// Revocation lists are taken and spread, but no check consults them: revoked nodes'
    /// adverts stay in directories and revoked grants keep working. Caught by the
    /// revocation checker (a `revoke` fault is added if the scenario has none).
    IgnoreRevocations,
    /// A model request goes to a random live node instead of the first of the candidates
    /// its directory gives. Caught by the routed checker: the node's advert does not list
    /// the model.
    RouteIgnoresDirectory,
    /// A model request gives up after the first candidate that provably did not take it.
    /// Caught by the served checker: other nodes serving the model were there.
    NoFailover,
    /// Model requests are ranked without their spreading inputs: the same turn for every
    /// request and no open sessions counted, so equally cheap nodes no longer take turns.
    /// Caught by the spread checker.
    NoSpread,
    /// A model session whose serving node crashed after accepting is sent to the next
    /// candidate. Caught by the attempts checker: a request tried again after acceptance.
    RetryAfterAccept,
    /// The first input to a mesh machine panics, as protocol code with a bug that panics
    /// would. Caught as the crash verdict (exit 3): `murmur-sim` turns a panic in a run
    /// into a verdict with the seed and the reproduction line.
    Panic,
}

impl Plant {
    /// Every planted bug.
    pub const ALL: [Self; 13] = [
        Self::SkipIncomingCheck,
        Self::RetryLost,
        Self::VolatileAccept,
        Self::WriteUnverified,
        Self::TrustAnyOffer,
        Self::OpenAdmission,
        Self::RefuseWhenFull,
        Self::IgnoreRevocations,
        Self::RouteIgnoresDirectory,
        Self::NoFailover,
        Self::NoSpread,
        Self::RetryAfterAccept,
        Self::Panic,
    ];

    /// The name on the command line (`--plant NAME`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::SkipIncomingCheck => "skip-incoming-check",
            Self::RetryLost => "retry-lost",
            Self::VolatileAccept => "volatile-accept",
            Self::WriteUnverified => "write-unverified",
            Self::TrustAnyOffer => "trust-any-offer",
            Self::OpenAdmission => "open-admission",
            Self::RefuseWhenFull => "refuse-when-full",
            Self::IgnoreRevocations => "ignore-revocations",
            Self::RouteIgnoresDirectory => "route-ignores-directory",
            Self::NoFailover => "no-failover",
            Self::NoSpread => "no-spread",
            Self::RetryAfterAccept => "retry-after-accept",
            Self::Panic => "panic",
        }
    }

    /// Whether it is a model routing bug (it needs a `[models]` section to act).
    #[must_use]
    pub const fn is_model(self) -> bool {
        matches!(
            self,
            Self::RouteIgnoresDirectory | Self::NoFailover | Self::NoSpread | Self::RetryAfterAccept
        )
    }
}

impl std::str::FromStr for Plant {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown plant `{text}` (one of: {})", names.join(", "))
        })
    }
}
