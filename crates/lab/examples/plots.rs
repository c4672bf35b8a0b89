//! Run one experiment at test size and write its charts: a quick way to look at the plots
//! while changing them. `cargo run -p shallow-lab --example plots -- tsq /tmp/plots`
//! (add `quick` as a third argument for `--quick` scale).

use shallow_lab::{run, Experiment, LabOptions, Scale};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let exp: Experiment = args.get(1).map_or("tsq", |s| s.as_str()).parse()?;
    let dir = std::path::PathBuf::from(args.get(2).map_or("lab-plots", |s| s.as_str()));
    let scale = if args.get(3).map(|s| s.as_str()) == Some("quick") {
        Scale::Quick
    } else {
        Scale::Tiny
    };
    let rep = run(
        exp,
        &LabOptions { seed: 1, scale },
        &mut |_: &str, _: f64| {},
    )?;
    println!("{}", rep.table());
    let out = shallow_lab::write_plots(&rep, &dir, true)?;
    for w in out.warnings {
        eprintln!("warning: {w}");
    }
    for f in out.files {
        println!("{}", f.display());
    }
    Ok(())
}
