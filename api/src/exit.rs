//! Exit codes shared by `murnode` and `mur`: 0 ok, 1 failed, 2 usage or configuration error.

use std::fmt;
use std::process::ExitCode;

/// The operation ran and failed (a refused grant, an unreachable node, an I/O error).
pub const FAILED: u8 = 1;
/// The operation could not start: bad flags, bad config, bad input files.
pub const USAGE: u8 = 2;

/// An error with the exit code it deserves.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub error: anyhow::Error,
}

impl CliError {
    /// A usage or configuration error (exit code 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self { code: USAGE, error: error.into() }
    }

    /// A failure of the operation itself (exit code 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self { code: FAILED, error: error.into() }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl From<anyhow::Error> for CliError {
    fn from(error: anyhow::Error) -> Self {
        Self::failed(error)
    }
}

/// Result type of CLI commands.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Extension to mark an error as a usage error at the point where it arises.
pub trait UsageContext<T> {
    /// Converts the error into a usage error (exit code 2) with `context`.
    fn usage_context(self, context: impl fmt::Display + Send + Sync + 'static) -> CliResult<T>;
}

impl<T, E: Into<anyhow::Error>> UsageContext<T> for Result<T, E> {
    fn usage_context(self, context: impl fmt::Display + Send + Sync + 'static) -> CliResult<T> {
        self.map_err(|err| CliError::usage(err.into().context(context)))
    }
}

/// Prints the error as `error: …` on stderr and turns the result into an exit code.
pub fn finish(result: CliResult) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.code)
        }
    }
}
