//! fluent-sink: a stand-in for a FireLens log router in berth's tests (no Fluent Bit image can be
//! pulled here). It is compiled by the test with `rustc` alone (std only, statically linked) and
//! imported as a one-file image.
//!
//! What it does, as a Fluent Bit router given berth's generated configuration would:
//! - reads `/fluent-bit/etc/fluent-bit.conf` (where FireLens mounts it), copies it to
//!   `/out/fluent-bit.conf`, and takes the `Record <key> <value>` lines of its `record_modifier`
//!   filter;
//! - listens with the fluentd forward protocol on `/var/run/fluent.sock` (msgpack: Message mode
//!   `[tag, time, record, option?]`, Forward mode `[tag, [[time, record], ...], option?]` and
//!   PackedForward mode `[tag, bin, option?]`, as Docker's fluentd log driver sends them);
//! - writes one JSON line per record to `/out/records.jsonl`: `{"tag": ..., "record": {...}}`,
//!   the record with the `Record` fields added.
//!
//! The msgpack decoder is written by hand: the test builds this file with `rustc` and no crates.

use std::fs::{self, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::{Arc, Mutex};

const CONFIG: &str = "/fluent-bit/etc/fluent-bit.conf";
const SOCKET: &str = "/var/run/fluent.sock";

#[derive(Debug, Clone)]
enum V {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Arr(Vec<V>),
    Map(Vec<(V, V)>),
    Ext(i8, Vec<u8>),
}

fn take<R: Read>(r: &mut R, n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

fn len<R: Read>(r: &mut R, n: usize) -> std::io::Result<usize> {
    Ok(be(&take(r, n)?) as usize)
}

fn decode<R: Read>(r: &mut R) -> std::io::Result<V> {
    let b = take(r, 1)?[0];
    Ok(match b {
        0x00..=0x7f => V::Int(i128::from(b)),
        0x80..=0x8f => map(r, usize::from(b & 0x0f))?,
        0x90..=0x9f => arr(r, usize::from(b & 0x0f))?,
        0xa0..=0xbf => str(r, usize::from(b & 0x1f))?,
        0xc0 => V::Nil,
        0xc2 => V::Bool(false),
        0xc3 => V::Bool(true),
        0xc4 => {
            let n = len(r, 1)?;
            V::Bin(take(r, n)?)
        }
        0xc5 => {
            let n = len(r, 2)?;
            V::Bin(take(r, n)?)
        }
        0xc6 => {
            let n = len(r, 4)?;
            V::Bin(take(r, n)?)
        }
        0xc7..=0xc9 => {
            let n = len(r, 1 << (b - 0xc7))?;
            let t = take(r, 1)?[0] as i8;
            V::Ext(t, take(r, n)?)
        }
        0xca => V::Float(f64::from(f32::from_bits(be(&take(r, 4)?) as u32))),
        0xcb => V::Float(f64::from_bits(be(&take(r, 8)?))),
        0xcc => V::Int(i128::from(be(&take(r, 1)?))),
        0xcd => V::Int(i128::from(be(&take(r, 2)?))),
        0xce => V::Int(i128::from(be(&take(r, 4)?))),
        0xcf => V::Int(i128::from(be(&take(r, 8)?))),
        0xd0 => V::Int(i128::from(take(r, 1)?[0] as i8)),
        0xd1 => V::Int(i128::from(be(&take(r, 2)?) as u16 as i16)),
        0xd2 => V::Int(i128::from(be(&take(r, 4)?) as u32 as i32)),
        0xd3 => V::Int(i128::from(be(&take(r, 8)?) as i64)),
        0xd4..=0xd8 => {
            let n = 1usize << (b - 0xd4);
            let t = take(r, 1)?[0] as i8;
            V::Ext(t, take(r, n)?)
        }
        0xd9 => {
            let n = len(r, 1)?;
            str(r, n)?
        }
        0xda => {
            let n = len(r, 2)?;
            str(r, n)?
        }
        0xdb => {
            let n = len(r, 4)?;
            str(r, n)?
        }
        0xdc => {
            let n = len(r, 2)?;
            arr(r, n)?
        }
        0xdd => {
            let n = len(r, 4)?;
            arr(r, n)?
        }
        0xde => {
            let n = len(r, 2)?;
            map(r, n)?
        }
        0xdf => {
            let n = len(r, 4)?;
            map(r, n)?
        }
        0xe0..=0xff => V::Int(i128::from(b as i8)),
        0xc1 => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "0xc1 is never used",
            ));
        }
    })
}

fn str<R: Read>(r: &mut R, n: usize) -> std::io::Result<V> {
    Ok(V::Str(String::from_utf8_lossy(&take(r, n)?).into_owned()))
}

fn arr<R: Read>(r: &mut R, n: usize) -> std::io::Result<V> {
    (0..n).map(|_| decode(r)).collect::<Result<_, _>>().map(V::Arr)
}

fn map<R: Read>(r: &mut R, n: usize) -> std::io::Result<V> {
    (0..n)
        .map(|_| Ok((decode(r)?, decode(r)?)))
        .collect::<Result<_, _>>()
        .map(V::Map)
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json(v: &V) -> String {
    match v {
        V::Nil => "null".into(),
        V::Bool(b) => b.to_string(),
        V::Int(i) => i.to_string(),
        V::Float(f) => f.to_string(),
        V::Str(s) => json_str(s),
        V::Bin(b) => json_str(&String::from_utf8_lossy(b)),
        V::Arr(items) => format!(
            "[{}]",
            items.iter().map(json).collect::<Vec<_>>().join(",")
        ),
        V::Map(pairs) => format!(
            "{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{}:{}", json_str(&text(k)), json(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        V::Ext(t, b) => format!("{{\"ext\":{t},\"len\":{}}}", b.len()),
    }
}

fn text(v: &V) -> String {
    match v {
        V::Str(s) => s.clone(),
        V::Bin(b) => String::from_utf8_lossy(b).into_owned(),
        other => json(other),
    }
}

struct Sink {
    out: Mutex<fs::File>,
    fields: Vec<(String, String)>,
}

impl Sink {
    fn record(&self, tag: &str, record: &V) {
        let mut pairs = match record {
            V::Map(p) => p.clone(),
            other => vec![(V::Str("value".into()), other.clone())],
        };
        for (k, v) in &self.fields {
            pairs.push((V::Str(k.clone()), V::Str(v.clone())));
        }
        let line = format!(
            "{{\"tag\":{},\"record\":{}}}\n",
            json_str(tag),
            json(&V::Map(pairs))
        );
        if let Ok(mut f) = self.out.lock() {
            let _ = f.write_all(line.as_bytes());
            let _ = f.flush();
        }
    }

    fn entry(&self, msg: &V) {
        let V::Arr(items) = msg else { return };
        let (Some(tag), Some(second)) = (items.first(), items.get(1)) else {
            return;
        };
        let tag = text(tag);
        match second {
            // Forward mode: [[time, record], ...]
            V::Arr(entries) => {
                for e in entries {
                    if let V::Arr(pair) = e {
                        if let Some(record) = pair.get(1) {
                            self.record(&tag, record);
                        }
                    }
                }
            }
            // PackedForward mode: a stream of [time, record] in a bin (or str).
            V::Bin(_) | V::Str(_) => {
                let bytes = match second {
                    V::Str(s) => s.clone().into_bytes(),
                    V::Bin(b) => b.clone(),
                    _ => Vec::new(),
                };
                let mut r = &bytes[..];
                while !r.is_empty() {
                    match decode(&mut r) {
                        Ok(V::Arr(pair)) => {
                            if let Some(record) = pair.get(1) {
                                self.record(&tag, record);
                            }
                        }
                        _ => break,
                    }
                }
            }
            // Message mode: [tag, time, record, option?]
            _ => {
                if let Some(record) = items.get(2) {
                    self.record(&tag, record);
                }
            }
        }
    }
}

fn main() {
    let config = fs::read_to_string(CONFIG).unwrap_or_else(|e| {
        eprintln!("fluent-sink: cannot read {CONFIG}: {e}");
        std::process::exit(2)
    });
    let _ = fs::write("/out/fluent-bit.conf", &config);
    let fields = config
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Record "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open("/out/records.jsonl")
        .unwrap_or_else(|e| {
            eprintln!("fluent-sink: cannot open /out/records.jsonl: {e}");
            std::process::exit(2)
        });
    let sink = Arc::new(Sink {
        out: Mutex::new(out),
        fields,
    });
    let _ = fs::remove_file(SOCKET);
    let listener = UnixListener::bind(SOCKET).unwrap_or_else(|e| {
        eprintln!("fluent-sink: cannot listen on {SOCKET}: {e}");
        std::process::exit(2)
    });
    eprintln!("fluent-sink: listening on {SOCKET}");
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let sink = sink.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stream);
            while let Ok(msg) = decode(&mut r) {
                sink.entry(&msg);
            }
        });
    }
}
