//! `Settings`: the one configuration struct, fed alike from LSP `initializationOptions`,
//! `workspace/didChangeConfiguration` and CLI flags. Every field has a default, so an
//! empty or partial object is valid; unknown keys are ignored (clients send extra).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::toolchain::ToolchainSettings;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Settings {
    /// Path to `libnvrtc.so*` or the folder that holds it. Default: searched.
    pub nvrtc_path: Option<PathBuf>,
    /// Path to `ptxas`. Default: searched.
    pub ptxas_path: Option<PathBuf>,
    /// Folder with the CUDA headers (`cuda_fp16.h`). Default: searched.
    pub cuda_include: Option<PathBuf>,
    /// Target architecture for NVRTC and ptxas, e.g. `sm_90`.
    pub arch: String,
    /// Compile the device slice with NVRTC as the author types.
    pub compile_on_type: bool,
    /// Quiet time after the last keystroke before NVRTC runs.
    pub compile_debounce_ms: u64,
    /// Past this size a file gets syntax checks only.
    pub max_file_bytes: usize,
    /// Multiprocessor count used for `sms` in specs when no GPU has been seen.
    pub sms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nvrtc_path: None,
            ptxas_path: None,
            cuda_include: None,
            arch: "sm_90".into(),
            compile_on_type: true,
            compile_debounce_ms: 300,
            max_file_bytes: 2 * 1024 * 1024,
            sms: 132,
        }
    }
}

impl Settings {
    /// Read settings from a client's JSON. Accepts the settings object itself or one
    /// nested under `kernel-lsp` / `kernelLsp` (how VS Code and Neovim send sections).
    /// Returns the settings and, when some fields had the wrong type, a message naming
    /// them; the rest of the object still applies.
    pub fn from_json(value: &serde_json::Value) -> (Settings, Option<String>) {
        let obj = value
            .get("kernel-lsp")
            .or_else(|| value.get("kernelLsp"))
            .unwrap_or(value);
        let Some(map) = obj.as_object() else {
            return (Settings::default(), None);
        };
        // Field by field, so one bad value does not throw away the others.
        let mut settings = Settings::default();
        let mut bad = Vec::new();
        let mut merged = serde_json::to_value(&settings).expect("Settings serializes");
        for (key, v) in map {
            let mut trial = merged.clone();
            trial[key.as_str()] = v.clone();
            match serde_json::from_value::<Settings>(trial.clone()) {
                Ok(s) => {
                    settings = s;
                    merged = trial;
                }
                Err(e) => bad.push(format!("`{key}`: {e}")),
            }
        }
        let msg = (!bad.is_empty()).then(|| {
            format!(
                "kernel-lsp ignored settings with the wrong type: {}",
                bad.join("; ")
            )
        });
        (settings, msg)
    }

    pub fn toolchain(&self) -> ToolchainSettings {
        ToolchainSettings {
            nvrtc_path: self.nvrtc_path.clone(),
            ptxas_path: self.ptxas_path.clone(),
            cuda_include: self.cuda_include.clone(),
            arch: self.arch.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_section_and_partial_objects() {
        let (s, msg) = Settings::from_json(&json!({"kernel-lsp": {"arch": "sm_80"}}));
        assert_eq!(s.arch, "sm_80");
        assert!(s.compile_on_type);
        assert_eq!(msg, None);
    }

    #[test]
    fn a_bad_field_is_named_and_the_rest_applies() {
        let (s, msg) = Settings::from_json(&json!({"arch": "sm_89", "compileDebounceMs": "soon"}));
        assert_eq!(s.arch, "sm_89");
        assert_eq!(s.compile_debounce_ms, 300);
        let msg = msg.unwrap();
        assert!(msg.contains("`compileDebounceMs`"), "{msg}");
    }
}
