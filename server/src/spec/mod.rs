//! The `@bench` language (SPEC.md): parser, expression evaluator and checks against the
//! kernel's signature. Pure: spec lines in, a `BenchPlan` or diagnostics out.
