//! The `berth` binary: command line, configuration, wiring and signals. The only crate that uses
//! `anyhow`; every subcommand lives in its own module and returns the process exit code.

mod cmd_run;
mod cmd_validate;
mod input;
mod output;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// berth runs tasks — groups of containers described by an ECS-style task definition — on the local
/// Docker Engine, in dependency order, and cleans up after them without ever deleting data behind a
/// mount.
#[derive(Parser, Debug)]
#[command(name = "berth", version, about, long_about = None, propagate_version = true)]
#[command(
    after_help = "Examples:\n  berth run examples/web-app.json\n  berth validate examples/web-app.json\n  berth validate examples/web-app.json --graph text\n  berth completions bash > /etc/bash_completion.d/berth"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a task on the local Docker Engine until it stops, then clean up (see `berth run --help`).
    Run(cmd_run::Args),
    /// Check a task definition and report every problem at once (exit 0 valid, 65 invalid).
    Validate(cmd_validate::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to standard output.
    Completions {
        /// The shell to generate completions for.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd_run::run(args),
        Command::Validate(args) => cmd_validate::run(args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "berth", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("berth: error: {err:#}");
            ExitCode::from(1)
        }
    }
}
