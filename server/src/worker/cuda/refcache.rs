//! The reference's outputs, kept on the device between verify requests: every candidate
//! of a step is verified against the same current version on the same (case, seed)
//! inputs, so the reference runs once per (case, trial) and its outputs are reused
//! (issue #10, "fast at real sizes"). Keyed by the reference's source, plan and options
//! (not its label) and the trial's seed; bounded in bytes, oldest out first.

use std::collections::VecDeque;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::driver::DeviceBuffer;
use crate::worker::protocol::Version;

/// One (reference, case, trial): a copy of every buffer the verifier compares (`out` and
/// `inout`), by parameter index; `None` for `in` buffers.
pub struct RefOutputs {
    pub bufs: Vec<Option<DeviceBuffer>>,
}

impl RefOutputs {
    pub fn bytes(&self) -> u64 {
        self.bufs.iter().flatten().map(|b| b.bytes as u64).sum()
    }
}

pub type RefKey = [u8; 32];

/// What identifies the reference's outputs for one trial.
pub fn ref_key(v: &Version, case: usize, trial_seed: u64) -> RefKey {
    let mut h = Sha256::new();
    let plan = serde_json::to_string(&v.plan).unwrap_or_default();
    for part in [v.source.as_str(), plan.as_str()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    for o in &v.options {
        h.update((o.len() as u64).to_le_bytes());
        h.update(o.as_bytes());
    }
    h.update((case as u64).to_le_bytes());
    h.update(trial_seed.to_le_bytes());
    h.finalize().into()
}

#[derive(Default)]
pub struct RefCache {
    entries: VecDeque<(RefKey, Arc<RefOutputs>)>,
    bytes: u64,
}

impl RefCache {
    pub fn get(&self, key: &RefKey) -> Option<Arc<RefOutputs>> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    /// Keeps `outputs` if they fit in `budget` bytes, dropping the oldest entries first.
    /// Returns whether they were kept (too large for the budget: not cached).
    pub fn insert(&mut self, key: RefKey, outputs: Arc<RefOutputs>, budget: u64) -> bool {
        let size = outputs.bytes();
        if size > budget {
            return false;
        }
        while self.bytes + size > budget {
            match self.entries.pop_front() {
                Some((_, old)) => self.bytes -= old.bytes(),
                None => break,
            }
        }
        self.bytes += size;
        self.entries.push_back((key, outputs));
        true
    }
}
