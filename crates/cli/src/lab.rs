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
    /// network namespaces beside Shallow on a TUN, with a tbf bottleneck; root; tsq,
    /// notsent-lowat, pollout, autocork).
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

pub fn run(args: &LabArgs) -> anyhow::Result<()> {
    let exps: Vec<Experiment> = if args.experiment == "all" {
        Experiment::ALL.to_vec()
    } else {
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
    };
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
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(1000),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {msg:>24} {wide_bar} {percent}% virtual time",
    ) {
        bar.set_style(style);
    }
    let mut last = String::new();
    let mut progress = |arm: &str, frac: f64| {
        if arm != last {
            last = arm.to_string();
            bar.set_message(last.clone());
        }
        bar.set_position((frac * 1000.0) as u64);
    };
    let mut json = Vec::new();
    if args.substrate == Substrate::Linux {
        let lopts = shallow_lab::LinuxOptions {
            scale: opts.scale,
            seed: args.seed,
            kernel_only: args.kernel_only,
        };
        for e in exps {
            match shallow_lab::run_linux(e, &lopts, &mut progress) {
                Ok(rep) => {
                    if let Some(dir) = &args.plots {
                        let out = shallow_lab::write_linux_plots(&rep, dir, !args.no_png)?;
                        bar.suspend(|| {
                            for w in &out.warnings {
                                eprintln!("warning: {w}");
                            }
                            eprintln!(
                                "{}: {} chart files in {}",
                                rep.experiment,
                                out.files.len(),
                                dir.display()
                            );
                        });
                    }
                    if args.json {
                        json.push(rep.to_json());
                    } else {
                        bar.suspend(|| println!("{}", rep.table()));
                    }
                }
                Err(
                    err @ (shallow_lab::LabError::NotRoot(_)
                    | shallow_lab::LabError::Unsupported(_)),
                ) => {
                    bar.suspend(|| eprintln!("{}: {err}", e.name()));
                    if args.json {
                        json.push(serde_json::json!({
                            "experiment": e.name(),
                            "substrate": "linux",
                            "skipped": err.to_string(),
                        }));
                    }
                }
                Err(err) => return Err(err.into()),
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
        return Ok(());
    }
    for e in exps {
        let rep = shallow_lab::run(e, &opts, &mut progress)?;
        if let Some(dir) = &args.plots {
            let out = shallow_lab::write_plots(&rep, dir, !args.no_png)?;
            bar.suspend(|| {
                for w in &out.warnings {
                    eprintln!("warning: {w}");
                }
                eprintln!(
                    "{}: {} chart files in {}",
                    rep.experiment,
                    out.files.len(),
                    dir.display()
                );
            });
        }
        if args.json {
            json.push(rep.to_json());
        } else {
            bar.suspend(|| println!("{}", rep.table()));
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
