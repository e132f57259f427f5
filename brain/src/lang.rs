//! The three forms of a brain, one host behind them: a WebAssembly component (through the
//! runtime, its calls to the run's [`RunHost`] as the runtime's `BrainPort`), a rhai
//! script and a JavaScript script (QuickJS), whose calls go through [`script::call`] to
//! the same [`RunHost`].
//!
//! Scripts run on a thread of their own (interpreters cannot yield to tokio); a script
//! blocked in `recv` parks its thread on the host's future and uses no CPU. Each
//! interpreter asks the host as it goes whether to stop (the run is being stopped, or it
//! worked past its `busy` bound without waiting), so an infinite loop is stopped in every
//! language.

pub mod js;
pub mod rhai;
pub mod script;

use std::sync::Arc;

use murmur_runtime::brain::BrainLimits;
use murmur_runtime::{Installed, Runtime};
use tokio::sync::oneshot;

use crate::agent::AgentConfig;
use crate::run::RunHost;
use crate::source::{Language, Read};

/// Stack of a script's thread: rhai and QuickJS recurse on it (their own depth limits,
/// [`rhai::CALL_LEVELS_MAX`] and [`js::STACK_BYTES_MAX`], keep them well within).
pub const SCRIPT_THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// A brain ready to run.
#[derive(Clone)]
pub enum Compiled {
    Rhai(Arc<::rhai::AST>),
    Js(Arc<str>),
    Wasm(Arc<Installed>),
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Rhai(_) => "Compiled::Rhai",
            Self::Js(_) => "Compiled::Js",
            Self::Wasm(_) => "Compiled::Wasm",
        })
    }
}

/// Checks and prepares `read` for agent `config`: a script that does not parse, or a
/// component without the brain entry point or with an import the host does not provide,
/// is an error that says so (and the running brain, if any, keeps going).
pub fn compile(read: &Read, config: &AgentConfig, runtime: &Runtime) -> Result<Compiled, String> {
    match read.language {
        Language::Rhai => {
            let text =
                std::str::from_utf8(&read.bytes).map_err(|_| "a rhai brain is UTF-8 text".to_owned())?;
            rhai::compile(text).map(|ast| Compiled::Rhai(Arc::new(ast)))
        }
        Language::Js => {
            let text = std::str::from_utf8(&read.bytes)
                .map_err(|_| "a JavaScript brain is UTF-8 text".to_owned())?;
            js::check(text, config.memory_bytes)?;
            Ok(Compiled::Js(Arc::from(text)))
        }
        Language::Wasm => {
            let limits = BrainLimits {
                busy: config.busy,
                memory_bytes: config.memory_bytes,
                workdir: std::env::temp_dir(),
            };
            runtime
                .load_brain(&config.name, &read.bytes, &limits)
                .map(Compiled::Wasm)
                .map_err(|e| format!("{e:#}"))
        }
    }
}

/// A run under way.
pub struct Running {
    pub done: oneshot::Receiver<Result<(), String>>,
    /// For a component: its task, aborted to stop it at once.
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

impl Running {
    /// Stops a component's run at once (a script's stops at its next step, told by the
    /// host).
    pub fn abort(&self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Starts one run of `compiled` with `host`.
pub fn start(compiled: &Compiled, host: Arc<RunHost>, runtime: &Runtime) -> Running {
    let (tx, done) = oneshot::channel();
    match compiled {
        Compiled::Wasm(brain) => {
            let (brain, runtime) = (brain.clone(), runtime.clone());
            let task = tokio::spawn(async move {
                let port: Arc<dyn murmur_runtime::ports::BrainPort> = host.clone();
                let outcome = runtime.run_brain(&brain, port).await.map_err(|e| e.to_string());
                let _ = tx.send(outcome);
            });
            Running { done, task: Some(task) }
        }
        Compiled::Rhai(ast) => {
            let ast = ast.clone();
            spawn_script(host, tx, move |host, handle| rhai::run(&ast, host, handle));
            Running { done, task: None }
        }
        Compiled::Js(source) => {
            let source = source.clone();
            spawn_script(host, tx, move |host, handle| js::run(&source, host, handle));
            Running { done, task: None }
        }
    }
}

fn spawn_script(
    host: Arc<RunHost>,
    tx: oneshot::Sender<Result<(), String>>,
    body: impl FnOnce(Arc<RunHost>, tokio::runtime::Handle) -> Result<(), String> + Send + 'static,
) {
    let handle = tokio::runtime::Handle::current();
    let name = format!("brain-{}", host.agent.name());
    let spawned =
        std::thread::Builder::new().name(name).stack_size(SCRIPT_THREAD_STACK_BYTES).spawn(move || {
            let outcome = body(host, handle);
            let _ = tx.send(outcome);
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start a brain thread");
    }
}
