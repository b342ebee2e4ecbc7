//! berth's many-host mode on etcd: the only crate that knows etcd (as only berth-store knows the
//! database). berth writes no consensus of its own: etcd (3.4's v3 API, through the
//! `etcd-client` crate) holds every shared fact, leases make a lost node's keys disappear, and
//! transactions guard each placement.
//!
//! Modules: [`keys`] (the key layout, docs/cluster.md), [`record`] (the typed JSON values),
//! [`demand`] (what a task reserves), [`expr`] (the `memberOf` expression subset),
//! [`placement`] (constraints and strategies as pure functions), [`store`] (the etcd client:
//! connection, node leases, tasks, guarded placement and stop transactions), [`controller`] (the
//! placement pass), [`election`] (one controller leads).

pub mod controller;
pub mod demand;
pub mod election;
pub mod expr;
pub mod keys;
pub mod placement;
pub mod record;
pub mod store;
