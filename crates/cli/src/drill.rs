//! `shallow drill [--json] [--ipv6 | --ipv4-mapped-ipv6] [--verbose] PATH...`: run packetdrill scripts against the
//! engine in virtual time (the runner is `shallow_drill`; this module only walks paths and
//! formats results).
//!
//! `shallow drill --judge kernel [--packetdrill PATH] [--ipv6 | --ipv4-mapped-ipv6]
//! [--repeat N] [--json] [--record FILE] PATH...` runs each script on the engine and on the
//! running kernel (root) and says whether they agree ([`shallow_drill::judge`]).
//!
//! Exit status: 0 when no script failed (with `--judge`: none disagreed), 1 when one did, 2
//! on usage errors (no such path).

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;
use shallow_drill::expectations::{corpus_root, Expectation, Expectations, Status};
use shallow_drill::fuzz::{fuzz_one, Verdict};
use shallow_drill::judge::{
    allow_cubic, find_or_build_packetdrill, judge_script, kernel_release, missing_for_capture,
    missing_prerequisites, Agreement, AllowedCcGuard, Judged, Packetdrill, Variant,
};
use shallow_drill::record::Recorder;
use shallow_drill::{run_file, RunConfig};

/// Arguments of `shallow drill`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DrillArgs {
    /// `record` or `fuzz` (see their `--help`); without one, run the scripts given.
    #[command(subcommand)]
    pub cmd: Option<DrillCmd>,
    /// Script files or directories (searched recursively for `*.pkt`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Print one JSON document with the counts and every script's result.
    #[arg(long)]
    pub json: bool,
    /// Run over IPv6 (unless a script sets `--ip_version`).
    #[arg(long)]
    pub ipv6: bool,
    /// Run over IPv4-mapped IPv6 (AF_INET6 sockets, IPv4 packets), as packetdrill's
    /// `--ip_version=ipv4-mapped-ipv6` (unless a script sets `--ip_version`).
    #[arg(long, conflicts_with = "ipv6")]
    pub ipv4_mapped_ipv6: bool,
    /// Print a trace of packets and calls for each script.
    #[arg(long, short)]
    pub verbose: bool,
    /// Judge each script by running it on the running Linux kernel too (`kernel`, needs
    /// root): a script agrees when both pass or both fail at the same line with the same
    /// kind of mismatch.
    #[arg(long, value_parser = ["kernel"])]
    pub judge: Option<String>,
    /// The packetdrill binary for `--judge` (default: `$SHALLOW_PACKETDRILL`, else built once
    /// from ../shared/packetdrill/src into $TMPDIR/shallow-packetdrill).
    #[arg(long, requires = "judge")]
    pub packetdrill: Option<PathBuf>,
    /// With `--judge`: when the kernel's first run disagrees with the engine, run the kernel
    /// this many times in all and take its most frequent outcome (timing noise).
    #[arg(long, default_value_t = 3, requires = "judge")]
    pub repeat: u32,
    /// With `--judge`: seconds after which a kernel run is killed (and not judged).
    #[arg(long, default_value_t = 120, requires = "judge")]
    pub timeout: u64,
    /// With `--judge`: write the kernel's outcomes (and the kernel release) into this
    /// expectations file, keeping its engine entries; scripts are keyed by their path
    /// relative to the suite's `tcp/` folder.
    #[arg(long, requires = "judge")]
    pub record: Option<PathBuf>,
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

/// The variant the `--ipv6` / `--ipv4-mapped-ipv6` flags select.
fn variant_of(ipv6: bool, mapped: bool) -> Variant {
    if ipv6 {
        Variant::Ipv6
    } else if mapped {
        Variant::Ipv4MappedIpv6
    } else {
        Variant::Ipv4
    }
}

/// `shallow drill record` and `shallow drill fuzz`.
#[derive(Debug, clap::Subcommand)]
pub enum DrillCmd {
    /// Run scenarios (scripts of calls and inbound packets at absolute times) on the running
    /// kernel (root) and write complete scripts whose `>` lines are the kernel's packets.
    Record(RecordArgs),
    /// Differential fuzzing: random scenarios recorded on the running kernel (root) and
    /// replayed on the engine; divergences are shrunk and saved.
    Fuzz(FuzzArgs),
}

/// Arguments of `shallow drill fuzz`.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// The judge (only `kernel`).
    #[arg(long, value_parser = ["kernel"], default_value = "kernel")]
    pub judge: String,
    /// How many scenarios.
    #[arg(long, default_value_t = 100)]
    pub count: u64,
    /// The first scenario's seed (scenario i has seed + i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Folder for the shrunk divergences (`fuzz-SEED.pkt`: the kernel's recording with the
    /// engine's failure in a comment).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Over IPv6.
    #[arg(long)]
    pub ipv6: bool,
    /// Over IPv4-mapped IPv6 (AF_INET6 sockets, IPv4 packets).
    #[arg(long, conflicts_with = "ipv6")]
    pub ipv4_mapped_ipv6: bool,
    /// Times the kernel re-runs its own recording of a divergent scenario: if it fails one
    /// where the engine failed (same line, same kind), the divergence is the kernel's own
    /// run-to-run variance and is counted apart (`kernel_varies`), not as a disagreement.
    #[arg(long, default_value_t = 3)]
    pub kernel_repeats: usize,
    /// The peer negotiates TCP timestamps and every segment it sends (but an RST) carries
    /// them: its clock, now and then an old value (PAWS), and echoes of the kernel's clock.
    /// A seed's scenario is otherwise the same as without.
    #[arg(long)]
    pub timestamps: bool,
    /// Kernel runs the shrinker may spend on one divergence.
    #[arg(long, default_value_t = 12)]
    pub shrink: usize,
    /// The packetdrill binary (default as for `--judge`).
    #[arg(long)]
    pub packetdrill: Option<PathBuf>,
    /// Print one JSON document at the end.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct FuzzSummary {
    kernel: String,
    variant: Variant,
    seeds: String,
    /// Scenarios with TCP timestamps (`--timestamps`).
    timestamps: bool,
    agree: u64,
    disagree: u64,
    /// Divergences where the kernel also failed its own recording at the engine's line.
    kernel_varies: u64,
    rejected: u64,
    tolerance: &'static str,
    kernel_repeats: usize,
    divergences: Vec<FuzzDivergence>,
    kernel_variance: Vec<FuzzDivergence>,
    /// Scenarios the kernel could not run as generated, and why.
    rejections: Vec<FuzzDivergence>,
}

#[derive(Serialize)]
struct FuzzDivergence {
    seed: u64,
    actions: usize,
    failure: String,
}

fn fuzz(args: &FuzzArgs) -> Result<()> {
    let (pd, cc) = kernel_side(args.packetdrill.as_ref(), args.json, true)?;
    let variant = variant_of(args.ipv6, args.ipv4_mapped_ipv6);
    let rec = Recorder {
        pd,
        variant,
        max_fixes: 50,
        replays: 0,
    };
    let mut sum = FuzzSummary {
        kernel: kernel_release(),
        variant,
        seeds: format!("{}..{}", args.seed, args.seed + args.count),
        timestamps: args.timestamps,
        agree: 0,
        disagree: 0,
        kernel_varies: 0,
        rejected: 0,
        kernel_repeats: args.kernel_repeats,
        kernel_variance: Vec::new(),
        tolerance:
            "the runner's: 4 ms or 12.5% of the interval since the previous event, the larger",
        divergences: Vec::new(),
        rejections: Vec::new(),
    };
    for seed in args.seed..args.seed + args.count {
        match fuzz_one(
            &rec,
            seed,
            args.timestamps,
            args.shrink,
            args.kernel_repeats,
        )? {
            Verdict::Agree => sum.agree += 1,
            Verdict::KernelVaries {
                recorded,
                failure,
                kernel,
            } => {
                sum.kernel_varies += 1;
                if !args.json {
                    println!("KERNEL VARIES seed {seed}: engine {failure}; kernel {kernel}");
                }
                if let Some(dir) = &args.out {
                    std::fs::create_dir_all(dir)?;
                    let text = format!(
                        "// The engine's replay: {}\n// The kernel on its own recording: {}\n{recorded}",
                        failure.replace('\n', " "),
                        kernel.replace('\n', " ")
                    );
                    std::fs::write(dir.join(format!("varies-{seed}.pkt")), text)?;
                }
                sum.kernel_variance.push(FuzzDivergence {
                    seed,
                    actions: 0,
                    failure: format!("{failure} | kernel: {kernel}"),
                });
            }
            Verdict::Rejected(why) => {
                sum.rejected += 1;
                if !args.json {
                    println!("REJECTED seed {seed}: {why}");
                }
                sum.rejections.push(FuzzDivergence {
                    seed,
                    actions: 0,
                    failure: why,
                });
            }
            Verdict::Disagree {
                scenario,
                recorded,
                failure,
            } => {
                sum.disagree += 1;
                if !args.json {
                    println!(
                        "DISAGREE seed {seed} ({} actions): {failure}",
                        scenario.len()
                    );
                }
                if let Some(dir) = &args.out {
                    std::fs::create_dir_all(dir)?;
                    let text = format!(
                        "// The engine's replay: {}
{recorded}",
                        failure.replace('\n', " ")
                    );
                    std::fs::write(dir.join(format!("fuzz-{seed}.pkt")), text)?;
                }
                sum.divergences.push(FuzzDivergence {
                    seed,
                    actions: scenario.len(),
                    failure,
                });
            }
        }
    }
    let judged = sum.agree + sum.disagree;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
    } else {
        println!(
            "kernel {} ({variant}), seeds {}: {} agree, {} disagree, {} within the kernel's own variance, {} rejected; agreement {:.1}% of {judged} judged ({:.1}% counting the kernel's variance as disagreement)",
            sum.kernel,
            sum.seeds,
            sum.agree,
            sum.disagree,
            sum.kernel_varies,
            sum.rejected,
            if judged == 0 { 100.0 } else { 100.0 * sum.agree as f64 / judged as f64 },
            {
                let all = judged + sum.kernel_varies;
                if all == 0 { 100.0 } else { 100.0 * sum.agree as f64 / all as f64 }
            }
        );
    }
    drop(cc);
    Ok(())
}

/// Arguments of `shallow drill record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Scenario files.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Folder for the recorded scripts (same file names); default: print to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Record over IPv6.
    #[arg(long)]
    pub ipv6: bool,
    /// Record over IPv4-mapped IPv6 (AF_INET6 sockets, IPv4 packets).
    #[arg(long, conflicts_with = "ipv6")]
    pub ipv4_mapped_ipv6: bool,
    /// The packetdrill binary (default as for `--judge`).
    #[arg(long)]
    pub packetdrill: Option<PathBuf>,
    /// Also replay each recording on the engine and say whether it agrees.
    #[arg(long)]
    pub check: bool,
}

/// The packetdrill tool for kernel runs, its prerequisites checked, and cubic allowed in
/// new namespaces for as long as the guard lives.
fn kernel_side(
    binary: Option<&PathBuf>,
    quiet: bool,
    capture: bool,
) -> Result<(Packetdrill, AllowedCcGuard)> {
    let binary = match binary {
        Some(p) => p.clone(),
        None => find_or_build_packetdrill()?,
    };
    let mut missing = missing_prerequisites(&binary);
    if capture {
        missing.extend(missing_for_capture());
    }
    if !missing.is_empty() {
        anyhow::bail!("the kernel side needs {}", missing.join(", "));
    }
    let cc = allow_cubic()?;
    if cc.changed() && !quiet {
        eprintln!("note: added cubic to net.ipv4.tcp_allowed_congestion_control for the run (restored at exit)");
    }
    Ok((
        Packetdrill {
            binary,
            timeout: std::time::Duration::from_secs(120),
        },
        cc,
    ))
}

fn record(args: &RecordArgs) -> Result<()> {
    let (pd, cc) = kernel_side(args.packetdrill.as_ref(), false, true)?;
    let variant = variant_of(args.ipv6, args.ipv4_mapped_ipv6);
    let rec = Recorder {
        pd,
        variant,
        max_fixes: 50,
        replays: 3,
    };
    let mut disagree = 0;
    for sc in &args.scenarios {
        let text = std::fs::read_to_string(sc)?;
        let name = sc
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let r = rec.record(&name, &text)?;
        for f in &r.fixes {
            eprintln!("{name}: the kernel's result: {f}");
        }
        match &args.out {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                std::fs::write(dir.join(&name), &r.script)?;
                println!("recorded {name}: {} packets from the kernel", r.outbound);
            }
            None => print!("{}", r.script),
        }
        if args.check {
            let cfg = variant.run_config().map_err(anyhow::Error::msg)?;
            let report = match shallow_drill::parse_script(&name, &r.script) {
                Ok(s) => shallow_drill::run_script(&s, &cfg),
                Err(e) => anyhow::bail!("recorded script does not parse: {e}"),
            };
            match report.status {
                Status::Pass => println!("AGREE    {name}"),
                _ => {
                    disagree += 1;
                    println!("DISAGREE {name}: line {}: {}", report.line, report.reason)
                }
            }
        }
    }
    drop(cc);
    if disagree > 0 {
        use std::io::Write as _;
        std::io::stdout().flush()?;
        std::process::exit(1);
    }
    Ok(())
}

/// Runs `shallow drill`.
pub fn run(args: &DrillArgs) -> Result<()> {
    match &args.cmd {
        Some(DrillCmd::Record(r)) => return record(r),
        Some(DrillCmd::Fuzz(f)) => return fuzz(f),
        None => {}
    }
    let mut files = Vec::new();
    for p in &args.paths {
        if !p.exists() {
            eprintln!("error: no such file or directory: {}", p.display());
            std::process::exit(2);
        }
        collect(p, &mut files)?;
    }
    if args.judge.is_some() {
        return judge(args, &files);
    }
    let cfg = RunConfig {
        ipv6: args.ipv6,
        mapped: args.ipv4_mapped_ipv6,
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

#[derive(Serialize)]
struct JudgeSummary {
    kernel: String,
    variant: Variant,
    agree: usize,
    disagree: usize,
    skipped: usize,
    scripts: Vec<Judged>,
}

/// The script's path relative to the suite's `tcp/` folder (the expectations key), if it is
/// inside it.
fn suite_key(path: &Path) -> Option<String> {
    let root = corpus_root()?.canonicalize().ok()?;
    let rel = path
        .canonicalize()
        .ok()?
        .strip_prefix(&root)
        .ok()?
        .to_path_buf();
    Some(
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
    )
}

/// `--judge kernel`: each script on the engine and on the running kernel.
fn judge(args: &DrillArgs, files: &[PathBuf]) -> Result<()> {
    let variant = variant_of(args.ipv6, args.ipv4_mapped_ipv6);
    let (mut pd, cc) = kernel_side(args.packetdrill.as_ref(), args.json, false)?;
    pd.timeout = std::time::Duration::from_secs(args.timeout);
    let mut summary = JudgeSummary {
        kernel: kernel_release(),
        variant,
        agree: 0,
        disagree: 0,
        skipped: 0,
        scripts: Vec::new(),
    };
    for f in files {
        let name = f.display().to_string();
        if !variant.applies_to(&name) {
            continue;
        }
        let j = judge_script(&pd, f, variant, args.repeat)?;
        match j.agreement {
            Agreement::Agree => summary.agree += 1,
            Agreement::Disagree => summary.disagree += 1,
            Agreement::Skipped => summary.skipped += 1,
        }
        if !args.json {
            let runs = if j.kernel_runs.is_empty() {
                String::new()
            } else {
                format!(" (runs: {})", j.kernel_runs.join(" "))
            };
            match j.agreement {
                Agreement::Agree => println!("AGREE    {name}: {}", j.kernel.short()),
                Agreement::Disagree => {
                    println!("DISAGREE {name}");
                    println!(
                        "    kernel:  {}{runs} {}",
                        j.kernel.short(),
                        j.kernel.reason
                    );
                    println!("    shallow: {} {}", j.shallow.short(), j.shallow.reason);
                }
                Agreement::Skipped => {
                    let why = if j.kernel.status == Status::Skip {
                        &j.kernel.reason
                    } else {
                        &j.shallow.reason
                    };
                    println!("SKIP     {name}: {why}");
                }
            }
        }
        summary.scripts.push(j);
    }
    if let Some(path) = &args.record {
        let mut exp = if path.exists() {
            Expectations::load(path)?
        } else {
            Expectations::default()
        };
        exp.kernel_version = Some(summary.kernel.clone());
        for j in &summary.scripts {
            let Some(key) = suite_key(Path::new(&j.path)) else {
                anyhow::bail!(
                    "--record: {} is not inside ../shared/packetdrill/tcp",
                    j.path
                );
            };
            let e = exp.scripts.entry(key).or_insert_with(|| Expectation {
                status: j.shallow.status,
                reason: j.shallow.reason.clone(),
                line: j.shallow.line,
                kind: j.shallow.kind,
                kernel: None,
            });
            e.kernel = Some(j.kernel.clone());
        }
        std::fs::write(path, exp.to_toml())?;
        if !args.json {
            println!("recorded the kernel's outcomes in {}", path.display());
        }
    }
    let judged = summary.agree + summary.disagree;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "kernel {} ({variant}): {} agree, {} disagree, {} skipped; agreement {:.1}% of {judged} judged",
            summary.kernel,
            summary.agree,
            summary.disagree,
            summary.skipped,
            if judged == 0 { 100.0 } else { 100.0 * summary.agree as f64 / judged as f64 }
        );
    }
    drop(cc);
    if summary.disagree > 0 {
        use std::io::Write as _;
        std::io::stdout().flush()?;
        std::process::exit(1);
    }
    Ok(())
}
