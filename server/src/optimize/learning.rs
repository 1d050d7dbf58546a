//! Where a run's learned policy lives. Each project learns on its own: the state is
//! `.kernel-lsp/policy.json` at the workspace root, beside the history, and a project
//! with no state yet starts from the catalog's priors (`policy::Policy`'s cold start),
//! so one project's tries never show up in another's rationale. The user-level state
//! (`policy::default_path`, shared by every project) is used only on request: the
//! `sharedPolicy` setting or `optimize --shared-policy`.

use std::path::{Path, PathBuf};

/// The policy file for a run on `file`: the project's own, or with `shared` the
/// user-level one.
pub fn policy_path(file: &Path, shared: bool) -> PathBuf {
    choose(
        &super::history::workspace_root(file),
        shared,
        super::policy::default_path,
    )
}

/// The rule, apart from the file system: the project's `.kernel-lsp/policy.json` unless
/// `shared`, then `user()`.
fn choose(root: &Path, shared: bool, user: impl FnOnce() -> PathBuf) -> PathBuf {
    if shared {
        user()
    } else {
        root.join(".kernel-lsp").join("policy.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_project_learns_on_its_own_unless_shared_is_asked_for() {
        let user = || PathBuf::from("/home/u/.local/share/kernel-lsp/policy.json");
        assert_eq!(
            choose(Path::new("/work/a"), false, user),
            PathBuf::from("/work/a/.kernel-lsp/policy.json")
        );
        assert_eq!(
            choose(Path::new("/work/b"), false, user),
            PathBuf::from("/work/b/.kernel-lsp/policy.json")
        );
        assert_eq!(choose(Path::new("/work/a"), true, user), user());
    }
}
