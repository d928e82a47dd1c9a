//! CLI errors and exit codes: 0 success, 1 the operation failed, 2 bad usage or input.

use std::fmt;

use outboxkit_core::ErrorKind;

/// A failure with its exit code.
#[derive(Debug)]
pub struct CliError {
    /// 0 (stop quietly: the reader closed the pipe), 1 (operation failed) or 2 (bad usage
    /// or input).
    pub code: u8,
    /// What to tell the user (never a secret, payload or address); empty for a quiet stop.
    pub message: String,
}

/// `Result<T, CliError>`.
pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    /// Bad usage or input: exit code 2.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }

    /// The operation failed: exit code 1.
    pub fn failed(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: message.into(),
        }
    }

    /// Stop without a message and with exit code 0: whoever read the output is gone
    /// (`outbox deliveries list | head -1`).
    pub fn quiet() -> Self {
        CliError {
            code: 0,
            message: String::new(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<outboxkit_core::Error> for CliError {
    fn from(e: outboxkit_core::Error) -> Self {
        let code = match e.kind() {
            ErrorKind::InvalidInput | ErrorKind::Misconfigured => 2,
            _ => 1,
        };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}
