//! berth's many-host mode on etcd: the only crate that knows etcd (as only berth-store knows the
//! database). berth writes no consensus of its own: etcd (3.4's v3 API, through the
//! `etcd-client` crate) holds every shared fact, leases make a lost node's keys disappear, and
//! transactions guard each placement.
//!
//! It depends on `berth-engine` (never the other way round) for two things a node shares with
//! the engine that runs its tasks: the engine's task state, from which a node's status report is
//! made in one place ([`node::LocalStatus::of`], for the agent and the benchmark's simulated
//! fleet alike), and the clock ([`now_ms`], the engine's, so the cluster's records and the
//! engine's reports count time alike). Nothing here runs a task: that is the [`node::Local`]
//! side's.
//!
//! Modules:
//! - [`keys`]: the key layout (docs/cluster.md);
//! - [`connect`]: how etcd is reached (TLS, user, the refusal of an insecure etcd) and the roles
//!   each process needs;
//! - [`record`]: the typed JSON values;
//! - [`view`]: the whole cluster at one revision, and how watch events change it;
//! - [`demand`]: what a task reserves;
//! - [`expr`]: the `memberOf` expression subset;
//! - [`placement`]: constraints and strategies as pure functions;
//! - [`service`]: ECS's service rules (counts, percentages, deployments, what an update changes),
//!   for the CLI that writes a service and the controller that acts on it;
//! - [`run_task`]: ECS's RunTask/StopTask rules for tasks outside a service (how many at once,
//!   what a user's stop says);
//! - [`reconcile`]: the controller's decisions as one pure function (closing, services, placement);
//! - [`store`]: the etcd client: connection (with [`connect`]'s settings), leases, node records, drains, paged reads, watches,
//!   statuses;
//! - [`txns`]: the guarded transactions that change tasks and services;
//! - [`controller`]: the controller's pass (plan, then execute) and its watch-fed mirror;
//! - [`lease`]: one lease kept alive ([`lease::LeaseSession`]: grant or reclaim, renewals, gone
//!   or lost), for the election and the node;
//! - [`election`]: one controller leads;
//! - [`node`]: a node agent's registration, assignment watch and status reports, over the
//!   [`node::Local`] side that runs the tasks.

pub mod connect;
pub mod controller;
pub mod demand;
pub mod election;
pub mod expr;
pub mod keys;
pub mod lease;
pub mod node;
pub mod placement;
pub mod reconcile;
pub mod record;
pub mod run_task;
pub mod service;
pub mod store;
pub mod txns;
pub mod view;

/// Now, in milliseconds since the epoch, as the cluster's records store it: the engine's clock
/// (`berth_engine::report::now_ms`), 0 before the epoch.
pub fn now_ms() -> u64 {
    u64::try_from(berth_engine::report::now_ms()).unwrap_or(0)
}

/// What the crate's unit tests share.
#[cfg(test)]
pub(crate) mod testing {
    /// A valid one-container definition of family `web` (64 MiB), as the tests' tasks and
    /// services run it.
    pub(crate) fn definition() -> berth_model::TaskDefinition {
        berth_model::parse(
            r#"{"family":"web","containerDefinitions":[{"name":"app","image":"busybox","memory":64}]}"#,
        )
        .expect("a valid definition")
        .definition
    }
}
