//! Known bugs, planted on purpose in the code that ships so the simulator can prove its
//! checkers catch them (`murmur-sim run … --plant NAME`).
//!
//! A plant is a switch in a machine's configuration ([`Plants`]). The switches exist only
//! with this crate's `plant` feature, which the simulator turns on; without it
//! [`Plants::has`] is a constant `false` and the compiler removes every planted branch.
//! Nothing in `murnode` ever sets one.

/// A known bug a checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Plant {
    /// The task exchange accepts peers' tasks without the receiving node's grant check
    /// (`check_incoming`).
    SkipIncomingCheck,
    /// The task exchange reports a delivery whose outcome is unknown (a timeout, a closed
    /// connection) as not delivered, so the router tries another node although the first
    /// may have accepted.
    RetryLost,
    /// The owner answers "accepted" before the acceptance is on disk (it is written with a
    /// later state, if the node lives that long).
    VolatileAccept,
    /// A pull writes every chunk that arrives before checking it.
    WriteUnverified,
    /// A full directory refuses every newcomer, and no address range or peer is bounded:
    /// identities minted once with long TTLs keep honest joins out.
    RefuseWhenFull,
    /// Revocation lists are taken and spread, but no check consults them: revoked grants
    /// and nodes keep working until they expire.
    IgnoreRevocations,
}

/// The plants a machine runs with: none, unless the `plant` feature is on and a test set
/// one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plants {
    #[cfg(feature = "plant")]
    planted: Option<Plant>,
}

impl Plants {
    /// No planted bug: what every node runs.
    pub const NONE: Self = Self {
        #[cfg(feature = "plant")]
        planted: None,
    };

    /// `plant`, planted.
    #[cfg(feature = "plant")]
    #[must_use]
    pub const fn one(plant: Plant) -> Self {
        Self { planted: Some(plant) }
    }

    /// Whether `plant` is planted.
    #[must_use]
    #[allow(clippy::unused_self)] // without the feature the answer does not depend on it
    pub const fn has(self, plant: Plant) -> bool {
        #[cfg(feature = "plant")]
        {
            matches!(self.planted, Some(p) if p as u8 == plant as u8)
        }
        #[cfg(not(feature = "plant"))]
        {
            let _ = plant;
            false
        }
    }
}
