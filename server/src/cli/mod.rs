//! Command-line front-ends over the same engine the language server uses.

pub mod apply;
pub mod bench;
pub mod capture;
pub mod check;
pub mod device;
pub mod health;
pub mod kernelbench;
pub mod optimize;
pub mod profile;
pub mod report;

/// The exit code of a command that prints its own output: `Err` is printed to stderr.
pub fn finish(result: Result<(), String>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            std::process::ExitCode::from(1)
        }
    }
}
