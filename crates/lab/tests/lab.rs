//! `shallow_lab` at test size: every experiment runs and yields finite metrics in both arms,
//! the "reproduced" rule on synthetic numbers, the JSON shape, determinism.

use shallow_lab::{
    reproduced, run, Claim, Experiment, LabOptions, LabReport, Metric, Scale, UNCHANGED_TOLERANCE,
};

fn tiny(exp: Experiment, seed: u64) -> LabReport {
    let mut last = -1.0f64;
    let mut monotone = true;
    let mut arm = String::new();
    let rep = run(
        exp,
        &LabOptions {
            seed,
            scale: Scale::Tiny,
        },
        &mut |a: &str, f: f64| {
            if a != arm {
                arm = a.to_string();
                last = -1.0;
            }
            monotone &= (0.0..=1.0).contains(&f) && f >= last;
            last = f;
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", exp.name()));
    assert!(monotone, "{}: progress must rise within 0..=1", exp.name());
    rep
}

fn check_finite(rep: &LabReport) {
    assert!(!rep.metrics.is_empty(), "{}", rep.experiment);
    for m in &rep.metrics {
        assert!(
            m.off.is_finite() && m.on.is_finite(),
            "{} {}: off {} on {}",
            rep.experiment,
            m.name,
            m.off,
            m.on
        );
    }
    // Every experiment compares at least one metric with published figures.
    assert!(rep
        .metrics
        .iter()
        .any(|m| matches!(m.claim, Claim::Figures { .. })));
    let mut names: Vec<&str> = rep.metrics.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), rep.metrics.len(), "metric names are unique");
}

#[test]
fn tsq_runs_and_its_off_switch_lets_bytes_pile_up_below_tcp() {
    let rep = tiny(Experiment::Tsq, 1);
    check_finite(&rep);
    assert_eq!(rep.experiment, "tsq");
    // The off arm (completion at qdisc enqueue) must really remove TSQ's limit: more bytes
    // below TCP than with TSQ on, at both rates.
    for tag in ["1G", "100M"] {
        let m = rep
            .metrics
            .iter()
            .find(|m| m.name == format!("bytes_below_tcp_max@{tag}"))
            .expect("metric");
        assert!(m.off > m.on, "{tag}: off {} on {}", m.off, m.on);
    }
}

#[test]
fn notsent_lowat_runs() {
    check_finite(&tiny(Experiment::NotsentLowat, 1));
}

#[test]
fn pollout_runs() {
    check_finite(&tiny(Experiment::Pollout, 1));
}

#[test]
fn autocork_runs() {
    check_finite(&tiny(Experiment::Autocork, 1));
}

#[test]
fn ack_defer_runs() {
    check_finite(&tiny(Experiment::AckDefer, 1));
}

#[test]
fn same_seed_same_report_other_seed_runs_too() {
    let a = tiny(Experiment::Autocork, 7).to_json().to_string();
    let b = tiny(Experiment::Autocork, 7).to_json().to_string();
    assert_eq!(a, b);
    let c = tiny(Experiment::Autocork, 8);
    assert_eq!(c.seed, 8);
    check_finite(&c);
}

#[test]
fn reproduced_needs_same_direction_and_half_the_effect() {
    let down = Claim::Figures {
        off: 100.0,
        on: 20.0,
    }; // -80 %
    assert_eq!(reproduced(down, 10.0, 5.0), Some(true)); // -50 % >= 40 %
    assert_eq!(reproduced(down, 10.0, 6.0), Some(true)); // -40 %: exactly half
    assert_eq!(reproduced(down, 10.0, 6.5), Some(false)); // -35 %: too small
    assert_eq!(reproduced(down, 10.0, 15.0), Some(false)); // wrong direction
    assert_eq!(reproduced(down, 10.0, 10.0), Some(false)); // no effect
    let up = Claim::Figures {
        off: 100.0,
        on: 120.0,
    }; // +20 %
    assert_eq!(reproduced(up, 50.0, 56.0), Some(true)); // +12 %
    assert_eq!(reproduced(up, 50.0, 54.0), Some(false)); // +8 %
    assert_eq!(reproduced(up, 50.0, 40.0), Some(false));
    // To zero (backlog drops 230 -> 0).
    let to_zero = Claim::Figures {
        off: 230.0,
        on: 0.0,
    };
    assert_eq!(reproduced(to_zero, 100.0, 0.0), Some(true));
    assert_eq!(reproduced(to_zero, 0.0, 0.0), Some(false)); // nothing to remove
                                                            // From zero upwards: any rise; downwards impossible.
    assert_eq!(reproduced(up, 0.0, 1.0), Some(true));
    assert_eq!(reproduced(down, 0.0, 0.0), Some(false));
    // Unchanged within the tolerance.
    let t = UNCHANGED_TOLERANCE;
    assert_eq!(
        reproduced(Claim::Unchanged, 100.0, 100.0 * (1.0 + t * 0.9)),
        Some(true)
    );
    assert_eq!(
        reproduced(Claim::Unchanged, 100.0, 100.0 * (1.0 - t * 1.1)),
        Some(false)
    );
    assert_eq!(reproduced(Claim::Unchanged, 0.0, 0.0), Some(true));
    assert_eq!(reproduced(Claim::None, 1.0, 2.0), None);
    // Nothing non-finite reproduces.
    assert_eq!(reproduced(up, f64::NAN, 2.0), Some(false));
    assert_eq!(
        reproduced(Claim::Unchanged, 1.0, f64::INFINITY),
        Some(false)
    );
}

#[test]
fn json_shape() {
    let rep = LabReport {
        experiment: "x".into(),
        scale: Scale::Quick,
        seed: 3,
        metrics: vec![
            Metric::new(
                "acks",
                "1/s",
                Claim::Figures {
                    off: 240_000.0,
                    on: 40_000.0,
                },
                1000.0,
                100.0,
            ),
            Metric::new("tput", "Gbit/s", Claim::Unchanged, 1.0, 0.5),
            Metric::new("ctx", "1/s", Claim::None, 0.0, 3.0),
        ],
        config: [("off".to_string(), "sysctl 0".to_string())].into(),
        notes: vec!["n".into()],
        charts: Vec::new(),
    };
    let j = rep.to_json();
    assert_eq!(j["experiment"], "x");
    assert_eq!(j["scale"], "quick");
    assert_eq!(j["config"]["off"], "sysctl 0");
    let a = &j["metrics"]["acks"];
    assert_eq!(a["unit"], "1/s");
    assert_eq!(a["seed_off"], 240_000.0);
    assert_eq!(a["seed_on"], 40_000.0);
    assert_eq!(a["off"], 1000.0);
    assert_eq!(a["on"], 100.0);
    assert_eq!(a["ratio"], 0.1);
    assert_eq!(a["reproduced"], true);
    let t = &j["metrics"]["tput"];
    assert!(t["seed_off"].is_null() && t["seed_on"].is_null());
    assert_eq!(t["claim"], "unchanged");
    assert_eq!(t["reproduced"], false);
    let c = &j["metrics"]["ctx"];
    assert!(c["reproduced"].is_null());
    assert!(c["ratio"].is_null(), "off = 0 has no ratio");
    // The table names every metric and says what reproduced.
    let table = rep.table();
    for needle in ["acks", "tput", "ctx", "yes", "NO", "same", "QUICK"] {
        assert!(table.contains(needle), "{needle} in\n{table}");
    }
}

#[test]
fn experiment_names_round_trip() {
    for e in Experiment::ALL {
        assert_eq!(e.name().parse::<Experiment>(), Ok(e));
    }
    assert!("nope".parse::<Experiment>().is_err());
}

/// `--plots`: SVG for the ratio chart, the metric panels and every recorded chart, each naming
/// what it shows; PNG beside each when asked (rendered from the SVG) unless no font exists.
#[test]
fn plots_are_written() {
    let rep = LabReport {
        experiment: "demo".into(),
        scale: Scale::Tiny,
        seed: 1,
        metrics: vec![
            Metric::new(
                "acks",
                "1/s",
                Claim::Figures {
                    off: 240_000.0,
                    on: 40_000.0,
                },
                1000.0,
                100.0,
            ),
            Metric::new("tput", "Gbit/s", Claim::Unchanged, 1.0, 0.5),
            Metric::new("drops", "1/s", Claim::None, 0.0, 0.0),
        ],
        config: Default::default(),
        notes: Vec::new(),
        charts: vec![shallow_lab::Chart {
            name: "mem".into(),
            title: "memory over time".into(),
            x_desc: "time (s)".into(),
            y_desc: "TCP memory (pages)".into(),
            log_x: false,
            legend_lower_right: false,
            curves: vec![
                shallow_lab::Curve {
                    label: "off: lowat unset".into(),
                    dashed: true,
                    group: 0,
                    points: vec![(0.0, 1.0), (1.0, 5.0)],
                },
                shallow_lab::Curve {
                    label: "on: lowat 128 KB".into(),
                    dashed: false,
                    group: 0,
                    points: vec![(0.0, 1.0), (1.0, 2.0)],
                },
            ],
        }],
    };
    let dir = std::env::temp_dir().join(format!("shallow-lab-plots-{}", std::process::id()));
    let out = shallow_lab::write_plots(&rep, &dir, true).expect("plots");
    for stem in ["demo-ratios", "demo-metrics", "demo-mem"] {
        let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).expect(stem);
        assert!(svg.starts_with("<svg"), "{stem}");
    }
    let ratios = std::fs::read_to_string(dir.join("demo-ratios.svg")).unwrap();
    for needle in ["acks", "tput", "seed commit", "Shallow", "NOT reproduced"] {
        assert!(ratios.contains(needle), "{needle} in demo-ratios.svg");
    }
    let mem = std::fs::read_to_string(dir.join("demo-mem.svg")).unwrap();
    for needle in [
        "off: lowat unset",
        "on: lowat 128 KB",
        "time (s)",
        "TCP memory (pages)",
    ] {
        assert!(mem.contains(needle), "{needle} in demo-mem.svg");
    }
    if out.warnings.is_empty() {
        for stem in ["demo-ratios", "demo-metrics", "demo-mem"] {
            let png = std::fs::read(dir.join(format!("{stem}.png"))).expect(stem);
            assert_eq!(&png[1..4], b"PNG", "{stem}.png");
        }
    } else {
        println!("PNG not checked: {:?}", out.warnings);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
