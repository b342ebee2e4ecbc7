//! berth's many-host mode on etcd: the only crate that knows etcd (as only berth-store knows the
//! database). berth writes no consensus of its own: etcd (3.4's v3 API, through the
//! `etcd-client` crate) holds every shared fact, leases make a lost node's keys disappear, and
//! transactions guard each placement.
//!
//! Modules:
//! - [`keys`]: the key layout (docs/cluster.md);
//! - [`record`]: the typed JSON values;
//! - [`view`]: the whole cluster at one revision, and how watch events change it;
//! - [`demand`]: what a task reserves;
//! - [`expr`]: the `memberOf` expression subset;
//! - [`placement`]: constraints and strategies as pure functions;
//! - [`service`]: ECS's service rules (counts, percentages, deployments, what an update changes),
//!   for the CLI that writes a service and the controller that acts on it;
//! - [`reconcile`]: the controller's decisions as one pure function (closing, services, placement);
//! - [`store`]: the etcd client: connection, leases, node records, drains, paged reads, watches,
//!   statuses;
//! - [`txns`]: the guarded transactions that change tasks and services;
//! - [`controller`]: the controller's pass (plan, then execute) and its watch-fed mirror;
//! - [`election`]: one controller leads;
//! - [`node`]: a node agent's registration, assignment watch and status reports, over the
//!   [`node::Local`] side that runs the tasks.

pub mod controller;
pub mod demand;
pub mod election;
pub mod expr;
pub mod keys;
pub mod node;
pub mod placement;
pub mod reconcile;
pub mod record;
pub mod service;
pub mod store;
pub mod txns;
pub mod view;
