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
    /// Also write one SVG chart per experiment into this directory: the on/off ratio of each
    /// metric, the seed's beside Shallow's.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
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
    for e in exps {
        let rep = shallow_lab::run(e, &opts, &mut progress)?;
        if let Some(dir) = &args.plots {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{}.svg", rep.experiment));
            plot(&rep, &path).map_err(|e| anyhow::anyhow!("plot {}: {e}", path.display()))?;
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

/// On/off ratio per metric: the seed's (grey, where published) and Shallow's (blue).
fn plot(rep: &shallow_lab::LabReport, path: &std::path::Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let rows: Vec<(String, Option<f64>, Option<f64>)> = rep
        .metrics
        .iter()
        .map(|m| {
            let seed = match m.claim {
                shallow_lab::Claim::Figures { off, on } if off != 0.0 => Some(on / off),
                shallow_lab::Claim::Unchanged => Some(1.0),
                _ => None,
            };
            (m.name.clone(), seed, m.ratio().filter(|r| r.is_finite()))
        })
        .collect();
    let n = rows.len().max(1);
    let ymax = rows
        .iter()
        .flat_map(|r| [r.1, r.2])
        .flatten()
        .fold(1.0f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, ((150 * n as u32).max(800), 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: on/off ratio per metric (grey: seed commit, blue: Shallow)",
                rep.experiment
            ),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)?;
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 11))
        .y_desc("on / off")
        .draw()?;
    let grey = RGBColor(160, 160, 160);
    let blue = RGBColor(40, 90, 200);
    for (i, (_, seed, ours)) in rows.iter().enumerate() {
        let x = i as f64;
        if let Some(s) = seed {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.35, 0.0), (x - 0.02, *s)],
                grey.filled(),
            )))?;
        }
        if let Some(o) = ours {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.02, 0.0), (x + 0.35, *o)],
                blue.filled(),
            )))?;
        }
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(-0.5, 1.0), (n as f64 - 0.5, 1.0)],
        BLACK,
    )))?;
    root.present()?;
    Ok(())
}
