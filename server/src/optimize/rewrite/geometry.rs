//! (being written)
use super::{Candidate, RewriteContext, RewriteError};
type R = Result<Vec<Candidate>, RewriteError>;
fn todo(cx: &RewriteContext<'_>) -> R {
    Err(RewriteError::NotApplicable(format!(
        "not built yet for {}",
        cx.kernel.name
    )))
}
pub fn tunable_sweep(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn block_size(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn vectorize(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
pub fn grid_stride(cx: &RewriteContext<'_>) -> R {
    todo(cx)
}
