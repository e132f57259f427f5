//! Brains in JavaScript, on QuickJS (rquickjs): every host function is a global function of
//! the same snake_case name ([`super::script::FUNCTIONS`]); an error is a thrown `Error`,
//! bytes are `Uint8Array`s, and `console.log`/`warn`/`error` go to the agent's log. The
//! script runs as the body of a function (sloppy mode; `return` ends the run), exactly as
//! [`check`] parses it; its context has a memory limit and its stack a bound, and
//! QuickJS asks the host whether to stop as it runs (an infinite loop is interrupted).

use std::sync::Arc;

use rquickjs::{Context, Ctx, Function, Runtime};
use serde_json::{Value, json};

use super::script;
use crate::run::RunHost;

/// Bytes of the JavaScript stack (the thread's own is larger).
pub const STACK_BYTES_MAX: usize = 1024 * 1024;

/// Wraps the host's one entry point into a function per host function.
fn prelude() -> String {
    let names: Vec<String> = script::FUNCTIONS.iter().map(|(name, _)| format!("\"{name}\"")).collect();
    format!(
        r#"(() => {{
  const host = globalThis.__murmur_host;
  delete globalThis.__murmur_host;
  const call = (name, args) => {{
    const answer = JSON.parse(host(name, JSON.stringify(args)));
    if (Object.prototype.hasOwnProperty.call(answer, "err")) throw new Error(answer.err);
    return answer.ok;
  }};
  for (const name of [{names}]) globalThis[name] = (...args) => call(name, args);
  const decode = globalThis.base64_decode, encode = globalThis.base64_encode, log = globalThis.log;
  globalThis.base64_decode = (data) => Uint8Array.from(decode(data));
  globalThis.base64_encode = (bytes) => encode(typeof bytes === "string" ? bytes : Array.from(bytes));
  const line = (level) => (...parts) => log(level, parts.map(String).join(" "));
  globalThis.console = {{ log: line("info"), info: line("info"), debug: line("debug"), warn: line("warn"), error: line("error") }};
}})();"#,
        names = names.join(", ")
    )
}

fn runtime(memory_bytes: u64) -> Result<Runtime, String> {
    let runtime = Runtime::new().map_err(|e| format!("javascript: {e}"))?;
    runtime.set_memory_limit(usize::try_from(memory_bytes).unwrap_or(usize::MAX));
    runtime.set_max_stack_size(STACK_BYTES_MAX);
    Ok(runtime)
}

/// Parses a JavaScript brain without running it.
pub fn check(text: &str, memory_bytes: u64) -> Result<(), String> {
    let runtime = runtime(memory_bytes)?;
    let context = Context::full(&runtime).map_err(|e| format!("javascript: {e}"))?;
    context.with(|ctx| {
        ctx.globals().set("__source", text).map_err(|e| format!("javascript: {e}"))?;
        ctx.eval::<(), _>("new Function(__source)").map_err(|e| exception(&ctx, &e))
    })
}

/// Runs `source` to its end on this thread.
pub fn run(source: &str, host: Arc<RunHost>, handle: tokio::runtime::Handle) -> Result<(), String> {
    let runtime = runtime(host.agent.config.memory_bytes)?;
    {
        let host = host.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || host.must_stop().is_some())));
    }
    let context = Context::full(&runtime).map_err(|e| format!("javascript: {e}"))?;
    let outcome = context.with(|ctx| {
        let entry = {
            let host = host.clone();
            Function::new(ctx.clone(), move |name: String, args: String| -> String {
                let args: Vec<Value> = serde_json::from_str(&args).unwrap_or_default();
                let answer = match script::call(&host, &handle, &name, &args) {
                    Ok(value) => json!({ "ok": value }),
                    Err(reason) => json!({ "err": reason }),
                };
                answer.to_string()
            })
            .map_err(|e| format!("javascript: {e}"))?
        };
        ctx.globals().set("__murmur_host", entry).map_err(|e| format!("javascript: {e}"))?;
        ctx.eval::<(), _>(prelude()).map_err(|e| exception(&ctx, &e))?;
        // The brain runs as the body of a function, exactly as `check` parsed it (sloppy
        // mode, `return` ends the run); the wrapper keeps its line numbers.
        let mut options = rquickjs::context::EvalOptions::default();
        options.strict = false;
        ctx.eval_with_options::<(), _>(format!("(function () {{{source}\n}})();"), options)
            .map_err(|e| exception(&ctx, &e))
    });
    // An interrupt surfaces as an uncatchable error: say why it came.
    outcome.map_err(|error| match host.must_stop() {
        Some(why) => format!("stopped: {why}"),
        None => error,
    })
}

/// The message of the exception `error` stands for.
fn exception(ctx: &Ctx<'_>, error: &rquickjs::Error) -> String {
    if !matches!(error, rquickjs::Error::Exception) {
        return format!("javascript: {error}");
    }
    let caught = ctx.catch();
    if let Some(exception) = caught.as_exception() {
        let message = exception.message().unwrap_or_default();
        return match exception.stack() {
            Some(stack) if !stack.is_empty() => format!("javascript: {message}\n{stack}"),
            _ => format!("javascript: {message}"),
        };
    }
    match caught.as_string().and_then(|s| s.to_string().ok()) {
        Some(text) => format!("javascript: uncaught {text}"),
        None => "javascript: uncaught exception".into(),
    }
}
