//! (being written)
use super::{Candidate, RewriteContext, RewriteError};
type R = Result<Vec<Candidate>, RewriteError>;
fn todo(cx: &RewriteContext<'_>) -> R {
    Err(RewriteError::NotApplicable(format!(
        "not built yet for {}",
        cx.kernel.name
    )))
}
pub fn restrict_const(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn launch_bounds(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn unroll(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn fast_math(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn maxnreg(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
