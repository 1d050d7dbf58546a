//! (being written)
use super::{Candidate, RewriteContext, RewriteError};
type R = Result<Vec<Candidate>, RewriteError>;
fn todo(cx: &RewriteContext<'_>) -> R {
    Err(RewriteError::NotApplicable(format!(
        "not built yet for {}",
        cx.kernel.name
    )))
}
pub fn block(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn num_warps(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn num_stages(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
