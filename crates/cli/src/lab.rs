//! `shallow lab`: each seed commit's measurement reproduced on the emulator, mechanism off vs
//! on, beside the published figures (the experiments live in `shallow_lab`).

use clap::Args;
use shallow_lab::{Experiment, LabOptions, Scale};

/// Arguments of `shallow lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// Experiment: tsq, notsent-lowat, pollout, autocork, ack-defer, or all.
    pub experiment: String,
    /// Print JSON (one object; an array for `all`) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Master seed of the emulator (both arms use the same one).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Smaller scale (fewer flows, shorter runs): `lab all --quick` takes about a minute.
    #[arg(long)]
    pub quick: bool,
    /// Also write charts into this directory, SVG and PNG (rendered from the SVG): per
    /// experiment the on/off ratio of each metric beside the seed's (log scale) and every
    /// metric's values in its unit; with `--substrate linux` also the time series of the run
    /// (bottleneck backlog, TCP memory) with all four arms.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    /// With --plots: SVG only, no PNG.
    #[arg(long, requires = "plots")]
    pub no_png: bool,
    /// Where to run: `emulator` (virtual time, the default) or `linux` (the kernel's TCP in
    /// network namespaces beside Shallow on a TUN, with a tbf bottleneck; root; all five:
    /// for ack-defer the kernel's TCP sends to the kernel's receiver and to Shallow's).
    #[arg(long, value_enum, default_value_t = Substrate::Emulator)]
    pub substrate: Substrate,
    /// With `--substrate linux`: run only the kernel half (no TUN).
    #[arg(long)]
    pub kernel_only: bool,
}

/// Where `shallow lab` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Substrate {
    /// The deterministic emulator (virtual time).
    Emulator,
    /// Real Linux: kernel TCP and Shallow on a TUN, in network namespaces (root).
    Linux,
}

/// The experiments `args` names (`all`: every one); a bad name exits with clap's error.
fn experiments(args: &LabArgs) -> Vec<Experiment> {
    if args.experiment == "all" {
        return Experiment::ALL.to_vec();
    }
    match args.experiment.parse::<Experiment>() {
        Ok(e) => vec![e],
        Err(e) => {
            use clap::CommandFactory;
            let mut cmd = crate::Cli::command();
            let sub = cmd
                .find_subcommand_mut("lab")
                .cloned()
                .unwrap_or_else(|| cmd.clone());
            sub.bin_name("shallow lab")
                .error(clap::error::ErrorKind::ValueValidation, e)
                .exit()
        }
    }
}

/// The progress bar on stderr: the arm running and how far its virtual time has got.
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(1000),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {msg:>24} {wide_bar} {percent}% virtual time",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Says on stderr what `--plots` wrote.
fn plots_written(
    bar: &indicatif::ProgressBar,
    experiment: &str,
    out: &shallow_lab::PlotOutput,
    dir: &std::path::Path,
) {
    bar.suspend(|| {
        for w in &out.warnings {
            eprintln!("warning: {w}");
        }
        eprintln!(
            "{experiment}: {} chart files in {}",
            out.files.len(),
            dir.display()
        );
    });
}

/// Runs `e` on the Linux substrate and writes its plots: its JSON and table, or `Err` with
/// the skip's JSON when this machine cannot run it (the reason is on stderr).
fn run_on_linux(
    e: Experiment,
    args: &LabArgs,
    opts: &LabOptions,
    bar: &indicatif::ProgressBar,
    progress: &mut dyn FnMut(&str, f64),
) -> anyhow::Result<Result<(serde_json::Value, String), serde_json::Value>> {
    let lopts = shallow_lab::LinuxOptions {
        scale: opts.scale,
        seed: args.seed,
        kernel_only: args.kernel_only,
    };
    match shallow_lab::run_linux(e, &lopts, progress) {
        Ok(rep) => {
            if let Some(dir) = &args.plots {
                let out = shallow_lab::write_linux_plots(&rep, dir, !args.no_png)?;
                plots_written(bar, &rep.experiment, &out, dir);
            }
            Ok(Ok((rep.to_json(), rep.table())))
        }
        Err(err @ (shallow_lab::LabError::NotRoot(_) | shallow_lab::LabError::Unsupported(_))) => {
            bar.suspend(|| eprintln!("{}: {err}", e.name()));
            Ok(Err(serde_json::json!({
                "experiment": e.name(),
                "substrate": "linux",
                "skipped": err.to_string(),
            })))
        }
        Err(err) => Err(err.into()),
    }
}

/// Runs `e` on the emulator and writes its plots: its JSON and table.
fn run_on_emulator(
    e: Experiment,
    args: &LabArgs,
    opts: &LabOptions,
    bar: &indicatif::ProgressBar,
    progress: &mut dyn FnMut(&str, f64),
) -> anyhow::Result<(serde_json::Value, String)> {
    let rep = shallow_lab::run(e, opts, progress)?;
    if let Some(dir) = &args.plots {
        let out = shallow_lab::write_plots(&rep, dir, !args.no_png)?;
        plots_written(bar, &rep.experiment, &out, dir);
    }
    Ok((rep.to_json(), rep.table()))
}

pub fn run(args: &LabArgs) -> anyhow::Result<()> {
    let exps = experiments(args);
    let opts = LabOptions {
        seed: args.seed,
        scale: if args.quick {
            Scale::Quick
        } else {
            Scale::Full
        },
    };
    if args.quick && !args.json {
        println!(
            "QUICK scale: fewer flows and shorter runs than the seeds (see each table's notes)\n"
        );
    }
    let bar = progress_bar();
    let mut last = String::new();
    let mut progress = |arm: &str, frac: f64| {
        if arm != last {
            last = arm.to_string();
            bar.set_message(last.clone());
        }
        bar.set_position((frac * 1000.0) as u64);
    };
    let mut json = Vec::new();
    for e in exps {
        let ran = if args.substrate == Substrate::Linux {
            run_on_linux(e, args, &opts, &bar, &mut progress)?
        } else {
            Ok(run_on_emulator(e, args, &opts, &bar, &mut progress)?)
        };
        match ran {
            Ok((j, _)) if args.json => json.push(j),
            Ok((_, table)) => bar.suspend(|| println!("{table}")),
            Err(skipped) if args.json => json.push(skipped),
            Err(_) => {}
        }
    }
    bar.finish_and_clear();
    if args.json {
        let out = if json.len() == 1 {
            json.remove(0)
        } else {
            serde_json::Value::Array(json)
        };
        println!("{}", serde_json::to_string(&out)?);
    }
    Ok(())
}
