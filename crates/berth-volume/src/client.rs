//! A client for the plugin's socket, speaking HTTP/1.1 over one kept-alive connection: used by
//! `berth volume-plugin release`, the tests and the benchmark. Calls on one [`Client`] are
//! sequential; open one client per concurrent caller.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::protocol::{self, endpoint};
use crate::{Error, Result};

/// One connection to the plugin.
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

fn client_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Client(format!("{what}: {e}"))
}

/// Turn a non-empty `Err` into [`Error::Remote`].
fn check(err: String) -> Result<()> {
    if err.is_empty() {
        Ok(())
    } else {
        Err(Error::Remote(err))
    }
}

impl Client {
    /// Connect to the plugin's socket.
    pub async fn connect(socket: &Path) -> Result<Client> {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| client_err(&format!("connecting to {}", socket.display()), e))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| client_err("HTTP handshake", e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "plugin connection ended");
            }
        });
        Ok(Client { sender })
    }

    /// POST raw bytes to `path`; the status and the raw answer.
    pub async fn post_raw(&mut self, path: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>)> {
        self.sender
            .ready()
            .await
            .map_err(|e| client_err("connection", e))?;
        let req = Request::post(path)
            .header(hyper::header::HOST, "plugin")
            .header(
                hyper::header::ACCEPT,
                "application/vnd.docker.plugins.v1.2+json",
            )
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| client_err("building the request", e))?;
        let resp = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| client_err(path, e))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| client_err(path, e))?
            .to_bytes();
        Ok((status, body.to_vec()))
    }

    /// POST `req` as JSON and decode the answer (whatever its status).
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        path: &str,
        req: &Req,
    ) -> Result<Resp> {
        let body = serde_json::to_vec(req).map_err(|e| client_err("encoding", e))?;
        let (_, answer) = self.post_raw(path, body).await?;
        serde_json::from_slice(&answer).map_err(|e| {
            client_err(
                &format!(
                    "decoding the answer of {path} ({})",
                    String::from_utf8_lossy(&answer)
                ),
                e,
            )
        })
    }

    /// `VolumeDriver.Create`.
    pub async fn create(&mut self, name: &str, opts: &[(&str, &str)]) -> Result<()> {
        let opts: BTreeMap<String, String> = opts
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let req = protocol::CreateRequest {
            name: name.to_owned(),
            opts: (!opts.is_empty()).then_some(opts),
        };
        let r: protocol::ErrResponse = self.call(endpoint::CREATE, &req).await?;
        check(r.err)
    }

    /// `VolumeDriver.Remove`.
    pub async fn remove(&mut self, name: &str) -> Result<()> {
        let req = protocol::NameRequest {
            name: name.to_owned(),
        };
        let r: protocol::ErrResponse = self.call(endpoint::REMOVE, &req).await?;
        check(r.err)
    }

    /// `VolumeDriver.Mount`: the mount point.
    pub async fn mount(&mut self, name: &str, id: &str) -> Result<String> {
        let req = protocol::MountRequest {
            name: name.to_owned(),
            id: id.to_owned(),
        };
        let r: protocol::MountpointResponse = self.call(endpoint::MOUNT, &req).await?;
        check(r.err).map(|()| r.mountpoint)
    }

    /// `VolumeDriver.Unmount`.
    pub async fn unmount(&mut self, name: &str, id: &str) -> Result<()> {
        let req = protocol::MountRequest {
            name: name.to_owned(),
            id: id.to_owned(),
        };
        let r: protocol::ErrResponse = self.call(endpoint::UNMOUNT, &req).await?;
        check(r.err)
    }

    /// `VolumeDriver.Get`.
    pub async fn get(&mut self, name: &str) -> Result<protocol::VolumeInfo> {
        let req = protocol::NameRequest {
            name: name.to_owned(),
        };
        let r: protocol::GetResponse = self.call(endpoint::GET, &req).await?;
        check(r.err)?;
        r.volume
            .ok_or_else(|| Error::Client("Get answered without a Volume".into()))
    }

    /// `VolumeDriver.Path`.
    pub async fn path(&mut self, name: &str) -> Result<String> {
        let req = protocol::NameRequest {
            name: name.to_owned(),
        };
        let r: protocol::MountpointResponse = self.call(endpoint::PATH, &req).await?;
        check(r.err).map(|()| r.mountpoint)
    }

    /// `VolumeDriver.List`.
    pub async fn list(&mut self) -> Result<Vec<protocol::ListEntry>> {
        let r: protocol::ListResponse = self.call(endpoint::LIST, &serde_json::json!({})).await?;
        check(r.err).map(|()| r.volumes)
    }

    /// `Berth.Release`: drop up to `count` references of `id` (all when `None`).
    pub async fn release(
        &mut self,
        name: &str,
        id: &str,
        count: Option<u64>,
    ) -> Result<protocol::ReleaseResponse> {
        let req = protocol::ReleaseRequest {
            name: name.to_owned(),
            id: id.to_owned(),
            count,
        };
        let r: protocol::ReleaseResponse = self.call(endpoint::RELEASE, &req).await?;
        check(r.err.clone()).map(|()| r)
    }
}
