//! Command-line front-ends over the same engine the language server uses.

pub mod bench;
pub mod capture;
pub mod check;
pub mod device;
pub mod health;
pub mod kernelbench;
pub mod optimize;
pub mod profile;
pub mod report;
