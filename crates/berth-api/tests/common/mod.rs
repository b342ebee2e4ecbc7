//! What the metadata tests and the benchmark share: a minimal HTTP/1.1 keep-alive client (enough
//! for the endpoint's fixed-length answers) and task fixtures.
#![allow(dead_code)]

use berth_engine::TaskState;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One keep-alive connection.
pub struct Conn {
    stream: BufReader<TcpStream>,
}

impl Conn {
    pub async fn open(addr: std::net::SocketAddr) -> Conn {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        Conn {
            stream: BufReader::new(tcp),
        }
    }

    /// GET `path`; returns (status, body).
    pub async fn get(&mut self, path: &str) -> (u16, Vec<u8>) {
        let req = format!("GET {path} HTTP/1.1\r\nHost: metadata\r\n\r\n");
        self.stream
            .get_mut()
            .write_all(req.as_bytes())
            .await
            .expect("write");
        let mut line = String::new();
        self.stream.read_line(&mut line).await.expect("status line");
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let mut len = 0usize;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().expect("content-length");
            }
        }
        let mut body = vec![0; len];
        self.stream.read_exact(&mut body).await.expect("body");
        (status, body)
    }

    pub async fn get_json(&mut self, path: &str) -> (u16, serde_json::Value) {
        let (status, body) = self.get(path).await;
        let v = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("{path}: not JSON ({e}): {}", String::from_utf8_lossy(&body))
        });
        (status, v)
    }
}

/// A task of `n` containers in `mode` (bridge|host), every container created and running with a
/// Docker id from the fake runtime's numbering.
pub fn task(family: &str, n: usize, mode: &str) -> TaskState {
    let containers: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "name": format!("c{i}"),
                "image": "busybox:latest",
                "cpu": 128,
                "memory": 64,
                "essential": i == 0,
                "portMappings": [{"containerPort": 8000 + i}],
                "dockerLabels": {"team": "x"}
            })
        })
        .collect();
    let def = serde_json::json!({
        "family": family,
        "revision": 7,
        "networkMode": mode,
        "cpu": "512",
        "memory": "1 GB",
        "containerDefinitions": containers,
    });
    let parsed = berth_model::parse(&def.to_string()).expect("valid definition");
    TaskState::new(
        berth_engine::new_task_id(),
        parsed.definition,
        1_796_000_000_000,
    )
}
