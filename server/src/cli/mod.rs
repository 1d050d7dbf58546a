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

use std::path::Path;

use crate::settings::Settings;

/// The settings a command runs with: `--config FILE`, else `.kernel-lsp/settings.json` at
/// the workspace root of `file`, else defaults. `check` and `optimize` share it, so a CLI
/// user passes include folders and defines the way the editor does.
pub(crate) fn load_settings(config: Option<&Path>, file: &Path) -> Result<Settings, String> {
    let path = match config {
        Some(p) => p.to_path_buf(),
        None => {
            let p = crate::toolchain::project::workspace_root(file)
                .join(".kernel-lsp")
                .join("settings.json");
            if !p.exists() {
                return Ok(Settings::default());
            }
            p
        }
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: error: cannot read settings: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: error: not JSON: {e}", path.display()))?;
    let (settings, warning) = Settings::from_json(&value);
    if let Some(w) = warning {
        eprintln!("{}: warning: {w}", path.display());
    }
    Ok(settings)
}
