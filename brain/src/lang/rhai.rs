//! Brains in rhai: every host function is a rhai function of the same snake_case name
//! ([`super::script::FUNCTIONS`]); an error is a rhai exception (`try { … } catch (e)`).
//! Bytes are blobs. `print` and `debug` go to the agent's log.

use std::sync::Arc;

use rhai::{Dynamic, Engine, EvalAltResult, Position};
use serde_json::Value;

use super::script;
use crate::run::RunHost;

/// Nested function calls a brain may make.
pub const CALL_LEVELS_MAX: usize = 64;
/// Bytes of one string; elements of one array or map (a memory bomb stops at these).
pub const STRING_BYTES_MAX: usize = 1024 * 1024;
pub const ARRAY_ITEMS_MAX: usize = 64 * 1024;
pub const MAP_ITEMS_MAX: usize = 64 * 1024;
/// How often (in rhai operations) the host is asked whether to stop.
const CHECK_EVERY_OPS: u64 = 1024;

/// rhai's standard library, built once and shared by every brain's engine (each would
/// otherwise hold its own copy of every function table: a third of an idle brain).
static STANDARD: std::sync::LazyLock<rhai::Shared<rhai::Module>> = std::sync::LazyLock::new(|| {
    use rhai::packages::Package;
    rhai::packages::StandardPackage::new().as_shared_module()
});

/// An engine with the standard library and the brain limits, and no module resolver: a
/// brain imports nothing from the node's files.
fn engine() -> Engine {
    let mut engine = Engine::new_raw();
    engine.register_global_module(STANDARD.clone());
    engine
        .set_max_call_levels(CALL_LEVELS_MAX)
        .set_max_expr_depths(64, 32)
        .set_max_string_size(STRING_BYTES_MAX)
        .set_max_array_size(ARRAY_ITEMS_MAX)
        .set_max_map_size(MAP_ITEMS_MAX);
    engine
}

/// Parses a rhai brain.
pub fn compile(text: &str) -> Result<rhai::AST, String> {
    engine().compile(text).map_err(|e| format!("rhai: {e}"))
}

/// Runs `ast` to its end on this thread.
pub fn run(ast: &rhai::AST, host: Arc<RunHost>, handle: tokio::runtime::Handle) -> Result<(), String> {
    let mut engine = engine();
    {
        let host = host.clone();
        engine.on_progress(move |ops| {
            if ops % CHECK_EVERY_OPS != 0 {
                return None;
            }
            host.must_stop().map(Dynamic::from)
        });
    }
    {
        let host = host.clone();
        engine.on_print(move |text| host.agent.logs.brain("info", text));
    }
    {
        let host = host.clone();
        engine.on_debug(move |text, _, _| host.agent.logs.brain("debug", text));
    }
    for (name, arity) in script::FUNCTIONS {
        register(&mut engine, name, *arity, &host, &handle);
    }
    engine.run_ast(ast).map_err(|error| match *error {
        EvalAltResult::ErrorTerminated(reason, _) => format!("stopped: {reason}"),
        other => format!("rhai: {other}"),
    })
}

type Answer = Result<Dynamic, Box<EvalAltResult>>;

fn register(
    engine: &mut Engine,
    name: &'static str,
    arity: usize,
    host: &Arc<RunHost>,
    handle: &tokio::runtime::Handle,
) {
    let call = {
        let (host, handle) = (host.clone(), handle.clone());
        move |args: Vec<Dynamic>| -> Answer {
            let args = args.iter().map(to_json).collect::<Result<Vec<Value>, _>>()?;
            match script::call(&host, &handle, name, &args) {
                Ok(value) => from_json(name, value),
                Err(reason) => Err(EvalAltResult::ErrorRuntime(reason.into(), Position::NONE).into()),
            }
        }
    };
    match arity {
        0 => {
            engine.register_fn(name, move || call(vec![]));
        }
        1 => {
            engine.register_fn(name, move |a: Dynamic| call(vec![a]));
        }
        2 => {
            engine.register_fn(name, move |a: Dynamic, b: Dynamic| call(vec![a, b]));
        }
        _ => {
            engine.register_fn(name, move |a: Dynamic, b: Dynamic, c: Dynamic| call(vec![a, b, c]));
        }
    }
}

fn to_json(value: &Dynamic) -> Result<Value, Box<EvalAltResult>> {
    if value.is_blob() {
        let blob = value.clone().into_blob().unwrap_or_default();
        return Ok(Value::Array(blob.into_iter().map(Value::from).collect()));
    }
    rhai::serde::from_dynamic::<Value>(value)
}

fn from_json(name: &str, value: Value) -> Answer {
    if name == "base64_decode"
        && let Value::Array(items) = &value
    {
        let blob: rhai::Blob =
            items.iter().filter_map(|v| v.as_u64().and_then(|b| u8::try_from(b).ok())).collect();
        return Ok(Dynamic::from_blob(blob));
    }
    rhai::serde::to_dynamic(value)
}
