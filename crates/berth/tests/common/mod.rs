//! What the binary's integration tests share (each test crate that needs it declares `mod common;`):
//! [`agent`], the `berth agent` harness; [`cluster`], what the cluster tests share (controllers,
//! `berth cluster …` as JSON, node agents behind proxies to etcd, the whole `Fleet`);
//! [`credentials`], the lock every test serving 169.254.170.2 holds.

pub mod agent;
pub mod cluster;
pub mod credentials;
