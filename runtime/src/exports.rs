//! Strict export resolution: a guest's entry point is found by its exact versioned name.
//!
//! The host resolves `murmur:tool/run@0.1.0` (tools and drivers), `murmur:capsule/run@0.1.0`
//! (script capsules) and `murmur:hook/lifecycle@0.5.0` (hooks) and nothing else: no
//! unversioned name, no earlier version. (wasmtime matches names semver-compatibly, so
//! `@0.1.1` satisfies `@0.1.0`; a patch bump changes no ABI.) A component that lacks the
//! name fails at load time with an error naming it and how to rebuild.

use wasmtime::Engine;
use wasmtime::component::{Component, ComponentExportIndex};

use murmur_store::CapsuleKind;

/// The entry point of tools and inference drivers.
pub const TOOL_RUN: &str = "murmur:tool/run@0.1.0";
/// The entry point of script capsules.
pub const CAPSULE_RUN: &str = "murmur:capsule/run@0.1.0";
/// The lifecycle interface of hooks.
pub const HOOK_LIFECYCLE: &str = "murmur:hook/lifecycle@0.5.0";
/// The entry point of brain components.
pub const BRAIN_AGENT: &str = "murmur:brain/agent@0.1.0";

/// Handlers every hook must export (`on-task-start` and `on-task-end` are optional).
pub const HOOK_HANDLERS_REQUIRED: [&str; 7] = [
    "on-stage",
    "on-session-start",
    "on-inference",
    "on-tool-call",
    "on-shell",
    "on-compaction",
    "on-session-end",
];

/// The versioned interface a kind of component must export.
#[must_use]
pub const fn expected_interface(kind: CapsuleKind) -> &'static str {
    match kind {
        CapsuleKind::Tool | CapsuleKind::Driver => TOOL_RUN,
        CapsuleKind::Capsule => CAPSULE_RUN,
        CapsuleKind::Hook => HOOK_LIFECYCLE,
        CapsuleKind::Brain => BRAIN_AGENT,
        // Agents are manifest-only: no component of theirs is ever loaded.
        CapsuleKind::Agent => "(none: agents have no component)",
        // Data is never loaded as a component.
        CapsuleKind::Data => "(none: data runs nothing)",
    }
}

/// Where to call a loaded component.
#[derive(Clone, Debug)]
pub struct EntryPoint {
    /// The exported interface instance.
    pub interface: ComponentExportIndex,
    /// Its `run` function (tools, drivers, capsules); `None` for hooks, whose handlers are
    /// looked up by name when dispatched.
    pub run: Option<ComponentExportIndex>,
}

/// Finds the entry point `kind` requires, or explains what the component exports instead.
pub fn resolve(engine: &Engine, component: &Component, kind: CapsuleKind) -> Result<EntryPoint, String> {
    if matches!(kind, CapsuleKind::Agent | CapsuleKind::Data) {
        return Err(format!(
            "a {kind} artifact is not a component and cannot be loaded",
            kind = kind.as_str()
        ));
    }
    let name = expected_interface(kind);
    let Some(interface) = component.get_export_index(None, name) else {
        let exported: Vec<String> =
            component.component_type().exports(engine).map(|(export, _)| format!("`{export}`")).collect();
        let exported = if exported.is_empty() { "nothing".to_owned() } else { exported.join(", ") };
        let package = name.split('/').next().unwrap_or(name);
        let version = name.rsplit('@').next().unwrap_or("");
        return Err(format!(
            "component does not export `{name}` (it exports {exported}); this host resolves a {kind} by that exact \
             versioned interface, with no fallback to unversioned or older names: rebuild it against {package}@{version} \
             (wit/ in the murmur repository), or for a default artifact run `mur install NAME@VERSION`",
            kind = kind.as_str()
        ));
    };
    if kind == CapsuleKind::Hook {
        for handler in HOOK_HANDLERS_REQUIRED {
            if component.get_export_index(Some(&interface), handler).is_none() {
                return Err(format!(
                    "hook does not export `{handler}` in `{name}`; every handler but on-task-start and on-task-end is required"
                ));
            }
        }
        return Ok(EntryPoint { interface, run: None });
    }
    let run = component
        .get_export_index(Some(&interface), "run")
        .ok_or_else(|| format!("`{name}` is exported but has no `run` function"))?;
    Ok(EntryPoint { interface, run: Some(run) })
}
