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

/// The emulator records the charts `--plots` draws: exactly these names, each with an off
/// arm (dashed, first) and an on arm (solid), every curve with finite points.
fn check_charts(rep: &LabReport, names: &[&str]) {
    let got: Vec<&str> = rep.charts.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(got, names, "{}", rep.experiment);
    for c in &rep.charts {
        assert!(c.curves.len() >= 2, "{} {}", rep.experiment, c.name);
        assert!(c.curves[0].dashed && c.curves[0].label.starts_with("off"));
        assert!(c
            .curves
            .iter()
            .any(|k| !k.dashed && k.label.starts_with("on")));
        for k in &c.curves {
            assert!(
                k.points.len() >= 2,
                "{} {} {}: {} points",
                rep.experiment,
                c.name,
                k.label,
                k.points.len()
            );
            assert!(k.points.len() <= 5000);
            assert!(k
                .points
                .iter()
                .all(|(x, y)| x.is_finite() && y.is_finite() && *y >= 0.0));
            assert!(k.points.windows(2).all(|w| w[1].0 >= w[0].0), "x in order");
        }
    }
}

#[test]
fn tsq_runs_and_its_off_switch_lets_bytes_pile_up_below_tcp() {
    let rep = tiny(Experiment::Tsq, 1);
    check_finite(&rep);
    check_charts(
        &rep,
        &[
            "queue-delay-cdf-1G",
            "bytes-below-tcp-1G",
            "queue-delay-cdf-100M",
            "bytes-below-tcp-100M",
        ],
    );
    for c in rep.charts.iter().filter(|c| c.name.contains("cdf")) {
        assert!(c.log_x && c.legend_lower_right);
        for k in &c.curves {
            let last = k.points.last().unwrap();
            assert_eq!(last.1, 1.0, "a CDF ends at 1");
            assert!(k.points.windows(2).all(|w| w[1].1 >= w[0].1));
        }
        // TSQ keeps the host queue short: the on arm's median delay is below the off arm's.
        let median = |k: &shallow_lab::Curve| k.points.iter().find(|p| p.1 >= 0.5).unwrap().0;
        assert!(
            median(&c.curves[1]) < median(&c.curves[0]),
            "{}: on {} off {}",
            c.name,
            median(&c.curves[1]),
            median(&c.curves[0])
        );
    }
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
    let rep = tiny(Experiment::NotsentLowat, 1);
    check_finite(&rep);
    check_charts(&rep, &["tcp-mem-pages"]);
}

#[test]
fn pollout_runs() {
    let rep = tiny(Experiment::Pollout, 1);
    check_finite(&rep);
    check_charts(&rep, &["sender-wakeups", "tcp-mem-per-flow"]);
}

#[test]
fn autocork_runs() {
    let rep = tiny(Experiment::Autocork, 1);
    check_finite(&rep);
    check_charts(&rep, &["throughput", "segments-per-write"]);
}

/// The ACK-rate chart is the counter's differences: its area is the ACK count of the table.
#[test]
fn ack_defer_runs() {
    let rep = tiny(Experiment::AckDefer, 1);
    check_finite(&rep);
    check_charts(&rep, &["acks-per-second"]);
    let acks = rep.metrics.iter().find(|m| m.name == "acks").unwrap();
    let dur_s = 0.06; // Scale::Tiny
    for (k, per_s) in rep.charts[0].curves.iter().zip([acks.off, acks.on]) {
        let mut area = 0.0;
        let mut prev = 0.0;
        for &(t, v) in &k.points {
            area += v * (t - prev);
            prev = t;
        }
        let total = per_s * dur_s;
        assert!(
            (area - total).abs() <= 1e-6 * total,
            "{}: {area} vs {total}",
            k.label
        );
    }
}

/// `--plots` on a tiny emulator run: beside the ratio and metric charts, one SVG per recorded
/// chart, each with its curves drawn and named.
#[test]
fn emulator_plots_include_the_recorded_charts() {
    let rep = tiny(Experiment::AckDefer, 3);
    let dir = std::env::temp_dir().join(format!("shallow-lab-emu-plots-{}", std::process::id()));
    let out = shallow_lab::write_plots(&rep, &dir, false).expect("plots");
    assert!(out
        .files
        .contains(&dir.join("ack-defer-acks-per-second.svg")));
    let svg = std::fs::read_to_string(dir.join("ack-defer-acks-per-second.svg")).unwrap();
    for needle in [
        "off: tcp_backlog_ack_defer = 0",
        "on: tcp_backlog_ack_defer = 1",
        "ACKs per second",
        "virtual time",
    ] {
        assert!(svg.contains(needle), "{needle}");
    }
    // One line per arm: the off arm dashed (many short segments), the on arm one polyline.
    assert!(svg.matches("<polyline").count() >= 2, "{svg}");
    let _ = std::fs::remove_dir_all(&dir);
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

/// A reproduced metric with figures (acks 1000 -> 100 against 240000 -> 40000), one that
/// moves though "unchanged" was claimed (tput 1 -> 0.5), then `third`.
fn two_metrics_and(third: Metric) -> Vec<Metric> {
    vec![
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
        third,
    ]
}

#[test]
fn json_shape() {
    let rep = LabReport {
        experiment: "x".into(),
        scale: Scale::Quick,
        seed: 3,
        metrics: two_metrics_and(Metric::new("ctx", "1/s", Claim::None, 0.0, 3.0)),
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
        metrics: two_metrics_and(Metric::new("drops", "1/s", Claim::None, 0.0, 0.0)),
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
