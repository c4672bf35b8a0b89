//! `shallow drill [--json] [--ipv6] [--verbose] PATH...`: run packetdrill scripts against the
//! engine in virtual time (the runner is `shallow_drill`; this module only walks paths and
//! formats results).
//!
//! Exit status: 0 when no script failed, 1 when one did, 2 on usage errors (no such path).

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;
use shallow_drill::expectations::Status;
use shallow_drill::{run_file, RunConfig};

/// Arguments of `shallow drill`.
#[derive(Debug, clap::Args)]
pub struct DrillArgs {
    /// Script files or directories (searched recursively for `*.pkt`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Print one JSON document with the counts and every script's result.
    #[arg(long)]
    pub json: bool,
    /// Run over IPv6 (unless a script sets `--ip_version`).
    #[arg(long)]
    pub ipv6: bool,
    /// Print a trace of packets and calls for each script.
    #[arg(long, short)]
    pub verbose: bool,
}

#[derive(Serialize)]
struct ScriptResult {
    path: String,
    status: &'static str,
    line: u32,
    reason: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    log: Vec<String>,
}

#[derive(Serialize)]
struct Summary {
    passed: usize,
    failed: usize,
    skipped: usize,
    scripts: Vec<ScriptResult>,
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        entries.sort();
        for e in entries {
            if e.is_dir() || e.extension().is_some_and(|x| x == "pkt") {
                collect(&e, out)?;
            }
        }
    } else {
        out.push(path.to_path_buf());
    }
    Ok(())
}

/// Runs `shallow drill`.
pub fn run(args: &DrillArgs) -> Result<()> {
    let mut files = Vec::new();
    for p in &args.paths {
        if !p.exists() {
            eprintln!("error: no such file or directory: {}", p.display());
            std::process::exit(2);
        }
        collect(p, &mut files)?;
    }
    let cfg = RunConfig {
        ipv6: args.ipv6,
        verbose: args.verbose,
    };
    let mut summary = Summary {
        passed: 0,
        failed: 0,
        skipped: 0,
        scripts: Vec::new(),
    };
    for f in &files {
        let r = run_file(f, &cfg);
        let path = f.display().to_string();
        match r.status {
            Status::Pass => summary.passed += 1,
            Status::Fail => summary.failed += 1,
            Status::Skip => summary.skipped += 1,
        }
        if !args.json {
            match r.status {
                Status::Pass => println!("PASS {path}"),
                Status::Fail if r.line > 0 => println!("FAIL {path}:{}: {}", r.line, r.reason),
                Status::Fail => println!("FAIL {path}: {}", r.reason),
                Status::Skip => println!("SKIP {path}: {}", r.reason),
            }
            for l in &r.log {
                println!("    {l}");
            }
        }
        summary.scripts.push(ScriptResult {
            path,
            status: r.status.as_str(),
            line: r.line,
            reason: r.reason,
            log: r.log,
        });
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "{} passed, {} failed, {} skipped",
            summary.passed, summary.failed, summary.skipped
        );
    }
    if summary.failed > 0 {
        use std::io::Write as _;
        std::io::stdout().flush()?;
        std::process::exit(1);
    }
    Ok(())
}
