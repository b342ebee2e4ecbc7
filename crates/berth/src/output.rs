//! How `berth run` shows a task to people (`text`: live lines, a summary table, a timeline) and to
//! tools (`json`: the engine's report objects, one per line).

use berth_engine::report::{self, PullPhase, Report};
use berth_engine::{Millis, TaskState};
use std::io::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Lines for people, then a summary table and a timeline.
    Text,
    /// One JSON object per line (events, then a summary).
    Json,
}

fn clock(time: &str) -> &str {
    // "2026-11-30T01:23:45.678Z" -> "01:23:45.678"
    time.get(11..23).unwrap_or(time)
}

/// Prints reports as they come: JSON lines, or text lines with a progress bar per image being
/// pulled when standard output is a terminal (plain lines otherwise).
pub struct Printer {
    out: Output,
    multi: Option<indicatif::MultiProgress>,
    bars: std::collections::HashMap<String, indicatif::ProgressBar>,
}

impl Printer {
    pub fn new(out: Output) -> Self {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
        Printer {
            out,
            multi: (out == Output::Text && tty).then(indicatif::MultiProgress::new),
            bars: std::collections::HashMap::new(),
        }
    }

    fn line(&self, text: &str) {
        match &self.multi {
            // Above the bars, so they are not garbled.
            Some(m) => {
                let _ = m.println(text);
            }
            None => {
                let _ = writeln!(std::io::stdout().lock(), "{text}");
            }
        }
    }

    pub fn print(&mut self, r: &Report) {
        if self.out == Output::Json {
            if r.is_progress() {
                return;
            }
            match serde_json::to_string(r) {
                Ok(line) => self.line(&line),
                Err(e) => eprintln!("berth: cannot encode an event: {e}"),
            }
            return;
        }
        if let Report::PullProgress {
            image,
            layers,
            layers_done,
            bytes,
            bytes_total,
            ..
        } = r
        {
            if let Some(bar) = self.bars.get(image).filter(|b| !b.is_finished()) {
                bar.set_length((*bytes_total).max(1));
                bar.set_position(*bytes);
                bar.set_message(format!("layers {layers_done}/{layers}"));
            }
            return;
        }
        if let (
            Some(multi),
            Report::Pull {
                image,
                phase,
                reason,
                ..
            },
        ) = (&self.multi, r)
        {
            match phase {
                PullPhase::Started => {
                    let bar = multi.add(indicatif::ProgressBar::new(1));
                    bar.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{prefix} [{bar:30}] {bytes}/{total_bytes} {msg}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    bar.set_prefix(format!("pulling {image}"));
                    self.bars.insert(image.clone(), bar);
                }
                PullPhase::Done | PullPhase::Failed | PullPhase::Cached => {
                    if let Some(bar) = self.bars.remove(image) {
                        let end = match (phase, reason) {
                            (PullPhase::Done, _) => "done".to_string(),
                            (_, Some(reason)) => reason.clone(),
                            _ => "failed".to_string(),
                        };
                        bar.finish_with_message(end);
                    }
                }
            }
        }
        if let Some(text) = text_line(r) {
            self.line(&text);
        }
    }
}

/// The text line for a report, if it deserves one.
fn text_line(r: &Report) -> Option<String> {
    match r {
        Report::Task {
            time,
            family,
            known,
            desired,
            ..
        } => Some(format!(
            "{}  task {family}: {known} (desired {desired})",
            clock(time)
        )),
        Report::Container {
            time,
            container,
            known,
            desired,
            exit_code,
            reason,
            ..
        } => {
            if *known == berth_engine::Status::None && reason.is_none() {
                // Every container starts at NONE; the task line already said so.
                return None;
            }
            let mut line = format!("{}  {container}: {known}", clock(time));
            if known != desired {
                line.push_str(&format!(" (desired {desired})"));
            }
            if let Some(code) = exit_code {
                line.push_str(&format!(", exit code {code}"));
            }
            if let Some(reason) = reason {
                line.push_str(&format!(" — {reason}"));
            }
            Some(line)
        }
        Report::Pull {
            time,
            container,
            image,
            phase,
            reason,
            ..
        } => {
            let phase = match phase {
                PullPhase::Started => "pull started",
                PullPhase::Done => "pulled",
                PullPhase::Failed => "pull failed",
                PullPhase::Cached => "using the cached image",
            };
            Some(match reason {
                Some(reason) => format!("{}  {container}: {image}: {phase}: {reason}", clock(time)),
                None => format!("{}  {container}: {image}: {phase}", clock(time)),
            })
        }
        Report::Restarted {
            time,
            container,
            restart_count,
            exit_code,
            ..
        } => {
            let after = match exit_code {
                Some(code) => format!("after exit code {code}"),
                None => "after an exit".to_string(),
            };
            Some(format!(
                "{}  {container}: restarted {after} (restart {restart_count})",
                clock(time)
            ))
        }
        Report::StopFailed {
            time,
            container,
            error,
            attempt,
            retry_at,
            ..
        } => Some(format!(
            "{}  {container}: stop failed (attempt {attempt}), still running; trying again at {}: {error}",
            clock(time),
            retry_at.as_deref().map_or("later", clock)
        )),
        Report::PullProgress { .. } | Report::ImageRemoved { .. } => None,
    }
}

/// Print the end of a run: the JSON summary line, or a table and a timeline.
pub fn print_summary(out: Output, state: &TaskState, now: Millis) {
    let summary = report::summary(state, now);
    if out == Output::Json {
        match serde_json::to_string(&summary) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("berth: cannot encode the summary: {e}"),
        }
        return;
    }
    println!();
    println!(
        "task {} {}:{} {} — {} — exit status {}",
        state.id,
        state.definition.family,
        state.definition.revision,
        state.known(),
        state.stopped_reason.as_deref().unwrap_or("-"),
        summary.exit_code
    );
    if let (Some(a), Some(b)) = (state.pull_started_at(), state.pull_stopped_at()) {
        println!(
            "images: pulls from {} to {} ({:.2}s)",
            report::rfc3339(a),
            report::rfc3339(b),
            (b - a) as f64 / 1000.0
        );
    }
    let rows: Vec<[String; 6]> = state
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            [
                c.name.clone(),
                if state.def(i).essential { "yes" } else { "no" }.to_string(),
                c.known.to_string(),
                c.exit_code.map_or("-".into(), |e| e.to_string()),
                c.docker_id
                    .as_deref()
                    .map_or("-".into(), |d| d.chars().take(12).collect()),
                c.reason.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = [
        "CONTAINER",
        "ESSENTIAL",
        "STATUS",
        "EXIT",
        "DOCKER ID",
        "REASON",
    ];
    print!("{}", table(&header, &rows));
    println!();
    print!("{}", timeline(state, now));
}

/// A left-aligned text table; the last column is not padded.
pub fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

const BAR: usize = 48;

/// One bar per container from the task's creation to now: `.` waiting, `p` pulling, `c` created,
/// `=` running, then blank once stopped; with the times of each step.
pub fn timeline(state: &TaskState, now: Millis) -> String {
    let start = state.created_at;
    let end = state
        .containers
        .iter()
        .filter_map(|c| c.finished_at)
        .max()
        .unwrap_or(now)
        .max(start + 1);
    let span = (end - start) as f64;
    let pos = |t: Millis| -> usize {
        let x = ((t - start).max(0) as f64 / span * BAR as f64).round() as usize;
        x.min(BAR)
    };
    let name_w = state
        .containers
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(4);
    let secs = |t: Option<Millis>| {
        t.map_or("-".to_string(), |t| {
            format!("{:.2}s", (t - start) as f64 / 1000.0)
        })
    };
    let mut out = format!(
        "timeline (0s … {:.2}s)   . waiting  p pulling  c created  = running\n",
        span / 1000.0
    );
    for c in &state.containers {
        let mut bar = vec![' '; BAR];
        let fin = c.finished_at.map_or(BAR, pos);
        let mark = |bar: &mut Vec<char>, from: Option<Millis>, to: usize, ch: char| {
            if let Some(f) = from {
                for cell in bar.iter_mut().take(to).skip(pos(f)) {
                    *cell = ch;
                }
            }
        };
        mark(&mut bar, Some(start), fin, '.');
        mark(&mut bar, c.pull_started_at, fin, 'p');
        mark(&mut bar, c.pull_stopped_at.or(c.created_at), fin, '.');
        mark(&mut bar, c.created_at, fin, 'c');
        if c.ran() {
            mark(
                &mut bar,
                c.started_at,
                fin.max(c.started_at.map_or(0, pos) + 1),
                '=',
            );
        }
        let bar: String = bar.into_iter().collect();
        out.push_str(&format!(
            "{:<name_w$} |{bar}| pulled {} created {} started {} stopped {}\n",
            c.name,
            secs(c.pull_stopped_at),
            secs(c.created_at),
            secs(c.started_at),
            secs(c.finished_at),
        ));
    }
    out
}
