//! The embedded strategy policy: a contextual bandit (being written).
