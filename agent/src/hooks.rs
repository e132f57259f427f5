//! Which hook output each lifecycle handler may commit (the runtime specification's
//! honoured-arm table), and what becomes of every other output.
//!
//! | handler | honoured arm |
//! |---|---|
//! | `on-stage` | `write-manifests` |
//! | `on-session-start`, `on-task-start`, `on-tool-call`, `on-shell`, `on-session-end` | none |
//! | `on-inference` | `artifact` |
//! | `on-compaction` | `replace-context` |
//! | `on-task-end` | `reopen-task` |
//!
//! `none` is always silent. Any other arm is a loud, non-fatal fault: a line in the hook's
//! log, and (except for `on-stage`, which runs before a session has a trace, and for async
//! hooks) a `hook_dispatch_error` trace record. An `Err` from a hook is logged and never
//! stops the loop.

use murmur_runtime::bindings::murmur::hook::lifecycle::HookOutput;
use murmur_runtime::ports::HookEvent;

/// One of the nine handlers of `murmur:hook/lifecycle@0.5.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Handler {
    Stage,
    SessionStart,
    TaskStart,
    Inference,
    ToolCall,
    Shell,
    Compaction,
    TaskEnd,
    SessionEnd,
}

impl Handler {
    pub const ALL: [Self; 9] = [
        Self::Stage,
        Self::SessionStart,
        Self::TaskStart,
        Self::Inference,
        Self::ToolCall,
        Self::Shell,
        Self::Compaction,
        Self::TaskEnd,
        Self::SessionEnd,
    ];

    /// The export's name in the WIT interface.
    #[must_use]
    pub const fn export_name(self) -> &'static str {
        match self {
            Self::Stage => "on-stage",
            Self::SessionStart => "on-session-start",
            Self::TaskStart => "on-task-start",
            Self::Inference => "on-inference",
            Self::ToolCall => "on-tool-call",
            Self::Shell => "on-shell",
            Self::Compaction => "on-compaction",
            Self::TaskEnd => "on-task-end",
            Self::SessionEnd => "on-session-end",
        }
    }

    /// Whether a hook may leave the handler out (it is then never dispatched for it).
    #[must_use]
    pub const fn optional(self) -> bool {
        matches!(self, Self::TaskStart | Self::TaskEnd)
    }

    /// The one arm this handler commits, if any.
    #[must_use]
    pub const fn honoured(self) -> Option<Arm> {
        match self {
            Self::Stage => Some(Arm::WriteManifests),
            Self::Inference => Some(Arm::Artifact),
            Self::Compaction => Some(Arm::ReplaceContext),
            Self::TaskEnd => Some(Arm::ReopenTask),
            Self::SessionStart | Self::TaskStart | Self::ToolCall | Self::Shell | Self::SessionEnd => None,
        }
    }

    /// Whether a discarded arm from this handler is also a trace record (not at staging:
    /// no session, no trace file yet).
    #[must_use]
    pub const fn traces_faults(self) -> bool {
        !matches!(self, Self::Stage)
    }
}

impl std::fmt::Display for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.export_name())
    }
}

/// A non-`none` arm of `hook-output`, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arm {
    ReplaceContext,
    WriteManifests,
    Artifact,
    ReopenTask,
}

impl Arm {
    /// The arm of `output`, or `None` for `none`.
    #[must_use]
    pub const fn of(output: &HookOutput) -> Option<Self> {
        match output {
            HookOutput::None => None,
            HookOutput::ReplaceContext(_) => Some(Self::ReplaceContext),
            HookOutput::WriteManifests(_) => Some(Self::WriteManifests),
            HookOutput::Artifact(_) => Some(Self::Artifact),
            HookOutput::ReopenTask(_) => Some(Self::ReopenTask),
        }
    }

    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ReplaceContext => "replace-context",
            Self::WriteManifests => "write-manifests",
            Self::Artifact => "artifact",
            Self::ReopenTask => "reopen-task",
        }
    }
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the loop does with one hook's answer.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// `none`: nothing to do.
    Silent,
    /// The handler's honoured arm: apply it.
    Commit(HookOutput),
    /// Any other arm: log it (and trace it, where the handler allows) and go on.
    Discard(Arm),
    /// The hook returned `Err`: log it and go on.
    Failed(String),
}

/// The handler an event is dispatched to.
#[must_use]
pub const fn handler_of(event: &HookEvent) -> Handler {
    match event {
        HookEvent::Stage(_) => Handler::Stage,
        HookEvent::SessionStart(_) => Handler::SessionStart,
        HookEvent::TaskStart(_) => Handler::TaskStart,
        HookEvent::Inference(_) => Handler::Inference,
        HookEvent::ToolCall(_) => Handler::ToolCall,
        HookEvent::Shell(_) => Handler::Shell,
        HookEvent::Compaction(_) => Handler::Compaction,
        HookEvent::TaskEnd(_) => Handler::TaskEnd,
        HookEvent::SessionEnd(_) => Handler::SessionEnd,
    }
}

/// Judges one hook's answer to `handler`.
#[must_use]
pub fn judge(handler: Handler, answer: Result<HookOutput, String>) -> Verdict {
    match answer {
        Err(error) => Verdict::Failed(error),
        Ok(output) => match Arm::of(&output) {
            None => Verdict::Silent,
            Some(arm) if handler.honoured() == Some(arm) => Verdict::Commit(output),
            Some(arm) => Verdict::Discard(arm),
        },
    }
}

/// The line a discarded arm leaves in `workdir/logs/hook-<name>.log`.
#[must_use]
pub fn discard_line(hook: &str, handler: Handler, arm: Arm) -> String {
    let honoured = handler.honoured().map_or("only none".to_owned(), |a| format!("only {a}"));
    format!(
        "hook `{hook}`: {handler} returned {arm}, which {handler} does not honour ({honoured}); discarded"
    )
}

/// The line an `Err` from a hook leaves in its log.
#[must_use]
pub fn error_line(hook: &str, handler: Handler, error: &str) -> String {
    format!("hook `{hook}`: {handler} failed: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_arm() -> Vec<HookOutput> {
        vec![
            HookOutput::ReplaceContext(Vec::new()),
            HookOutput::WriteManifests(Vec::new()),
            HookOutput::Artifact("a".into()),
            HookOutput::ReopenTask("r".into()),
        ]
    }

    #[test]
    fn each_handler_commits_exactly_its_honoured_arm() {
        for handler in Handler::ALL {
            assert!(matches!(judge(handler, Ok(HookOutput::None)), Verdict::Silent));
            let mut committed = Vec::new();
            for output in every_arm() {
                let arm = Arm::of(&output).unwrap();
                match judge(handler, Ok(output)) {
                    Verdict::Commit(_) => committed.push(arm),
                    Verdict::Discard(discarded) => assert_eq!(discarded, arm),
                    other => panic!("{handler}: {other:?}"),
                }
            }
            assert_eq!(committed, handler.honoured().into_iter().collect::<Vec<_>>(), "{handler}");
        }
        let table: Vec<_> =
            Handler::ALL.iter().map(|h| (h.export_name(), h.honoured().map(Arm::as_str))).collect();
        assert_eq!(
            table,
            [
                ("on-stage", Some("write-manifests")),
                ("on-session-start", None),
                ("on-task-start", None),
                ("on-inference", Some("artifact")),
                ("on-tool-call", None),
                ("on-shell", None),
                ("on-compaction", Some("replace-context")),
                ("on-task-end", Some("reopen-task")),
                ("on-session-end", None),
            ]
        );
    }

    #[test]
    fn errors_are_reported_not_raised() {
        assert!(matches!(judge(Handler::TaskEnd, Err("boom".into())), Verdict::Failed(e) if e == "boom"));
        let line = discard_line("audit", Handler::ToolCall, Arm::ReopenTask);
        assert!(
            line.contains("audit") && line.contains("on-tool-call") && line.contains("reopen-task"),
            "{line}"
        );
    }
}
