//! The agent's control API: HTTP/JSON on a Unix socket (docs/api.yaml). For now its request and
//! response bodies ([`types`]), shared by the server and the CLI client.

pub mod types;
