//! Charts of a [`LabReport`]: SVG drawn with `plotters`, and the same picture as PNG rendered
//! from that SVG with `resvg` (so a user can look without a browser).
//!
//! Per experiment:
//! * `EXP-ratios.svg`: the on/off ratio of every metric on a log scale, the seed commit's
//!   beside Shallow's, each with its verdict;
//! * `EXP-metrics.svg`: one panel per metric with its absolute values and unit (seed off/on,
//!   Shallow off/on), so the scale of each side is visible;
//! * `EXP-NAME.svg` for each [`Chart`] the experiment recorded (time series, CDFs): off and
//!   on arms as lines of different colour and dash.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{Chart, Claim, LabReport};

/// Why a chart could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Creating the directory or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// plotters refused to draw.
    #[error("drawing {0}")]
    Draw(String),
    /// The SVG could not be rendered to PNG.
    #[error("rendering {path} to PNG: {why}")]
    Png {
        /// The PNG file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// What [`write_plots`] wrote.
#[derive(Debug, Default)]
pub struct PlotOutput {
    /// Files written (SVG, and PNG when asked for and possible).
    pub files: Vec<PathBuf>,
    /// Things the caller should tell the user (e.g. PNG skipped: no font).
    pub warnings: Vec<String>,
}

/// Colours: grey for the seed commit, blue for Shallow; light for off, dark for on. Off and
/// on differ in lightness too, so they stay apart in grey-scale print.
const SEED_OFF: RGBColor = RGBColor(200, 200, 200);
const SEED_ON: RGBColor = RGBColor(110, 110, 110);
const OURS_OFF: RGBColor = RGBColor(150, 185, 240);
const OURS_ON: RGBColor = RGBColor(25, 70, 170);
/// Line colours of the groups of a [`Chart`]'s curves.
const ARM_COLOURS: [RGBColor; 4] = [
    RGBColor(230, 120, 20),
    RGBColor(25, 70, 170),
    RGBColor(40, 150, 60),
    RGBColor(150, 40, 150),
];

fn draw_err<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> PlotError + '_ {
    move |e| PlotError::Draw(format!("{what}: {e:?}"))
}

/// Writes every chart of `rep` into `dir` (created if missing): SVG always, PNG beside it when
/// `png` is set and a TrueType font for the text can be found on this system.
pub fn write_plots(rep: &LabReport, dir: &Path, png: bool) -> Result<PlotOutput, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut svgs: Vec<(String, String)> = Vec::new();
    let who = Who {
        short: "Shallow",
        long: "Shallow (emulator)",
        subtitle: subtitle(rep),
        nan_is_missing: false,
    };
    svgs.push((format!("{}-ratios", rep.experiment), ratio_svg(rep, &who)?));
    svgs.push((
        format!("{}-metrics", rep.experiment),
        metrics_svg(rep, &who)?,
    ));
    for c in &rep.charts {
        svgs.push((
            format!("{}-{}", rep.experiment, c.name),
            chart_svg(&rep.experiment, &subtitle(rep), c)?,
        ));
    }
    write_files(dir, svgs, png)
}

/// Writes the charts of a Linux-substrate run: per half (`EXP-linux-kernel-*`,
/// `EXP-linux-shallow-*`) the ratio chart and metric panels, and the recorded time series
/// with all four arms (`EXP-linux-NAME`).
pub fn write_linux_plots(
    rep: &crate::LinuxReport,
    dir: &Path,
    png: bool,
) -> Result<PlotOutput, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut svgs: Vec<(String, String)> = Vec::new();
    let sub = rep.scale.short();
    let [kernel, shallow] = rep.as_lab_reports();
    for (half, short, long) in [
        (kernel, "Linux", "Linux kernel (this machine)"),
        (shallow, "Shallow", "Shallow on a TUN (this machine)"),
    ] {
        let who = Who {
            short,
            long,
            subtitle: format!("{sub}, Linux substrate"),
            nan_is_missing: true,
        };
        svgs.push((
            format!("{}-ratios", half.experiment),
            ratio_svg(&half, &who)?,
        ));
        svgs.push((
            format!("{}-metrics", half.experiment),
            metrics_svg(&half, &who)?,
        ));
    }
    let name = format!("{}-linux", rep.experiment);
    for c in &rep.charts {
        svgs.push((format!("{name}-{}", c.name), chart_svg(&name, sub, c)?));
    }
    write_files(dir, svgs, png)
}

fn write_files(
    dir: &Path,
    svgs: Vec<(String, String)>,
    png: bool,
) -> Result<PlotOutput, PlotError> {
    let mut out = PlotOutput::default();
    let fonts = if png { Some(font_db()) } else { None };
    if let Some(Err(w)) = &fonts {
        out.warnings.push(w.clone());
    }
    for (stem, svg) in svgs {
        let path = dir.join(format!("{stem}.svg"));
        std::fs::write(&path, &svg).map_err(|source| PlotError::Io {
            path: path.clone(),
            source,
        })?;
        out.files.push(path);
        if let Some(Ok(db)) = &fonts {
            let path = dir.join(format!("{stem}.png"));
            svg_to_png(&svg, db, &path)?;
            out.files.push(path);
        }
    }
    Ok(out)
}

/// The system's fonts, with the generic `sans-serif` family (what plotters writes) mapped
/// to a sans face that exists here.
fn font_db() -> Result<std::sync::Arc<resvg::usvg::fontdb::Database>, String> {
    let mut db = resvg::usvg::fontdb::Database::new();
    db.load_system_fonts();
    let families: Vec<String> = db
        .faces()
        .flat_map(|f| f.families.iter().map(|(n, _)| n.clone()))
        .collect();
    if families.is_empty() {
        return Err("PNG skipped: no font found on this system (SVG written)".into());
    }
    let pick = [
        "DejaVu Sans",
        "Liberation Sans",
        "Noto Sans",
        "Arial",
        "Helvetica",
    ]
    .iter()
    .find(|want| families.iter().any(|f| f == *want))
    .map(|s| s.to_string())
    .or_else(|| {
        families
            .iter()
            .find(|f| f.contains("Sans") && !f.contains("Mono"))
            .cloned()
    })
    .unwrap_or_else(|| families[0].clone());
    db.set_sans_serif_family(pick);
    Ok(std::sync::Arc::new(db))
}

fn svg_to_png(
    svg: &str,
    db: &std::sync::Arc<resvg::usvg::fontdb::Database>,
    path: &Path,
) -> Result<(), PlotError> {
    let png_err = |why: String| PlotError::Png {
        path: path.to_path_buf(),
        why,
    };
    let opt = resvg::usvg::Options {
        fontdb: db.clone(),
        ..resvg::usvg::Options::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| png_err(e.to_string()))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| png_err("empty picture".into()))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let bytes = pixmap.encode_png().map_err(|e| png_err(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Whose measurements a chart shows beside the seed's.
struct Who {
    /// In bar labels ("Shallow off").
    short: &'static str,
    /// In the legend.
    long: &'static str,
    /// After the title: scale, seed, substrate.
    subtitle: String,
    /// A NaN value means "this arm does not exist" (Linux has no TSQ switch), not a failed
    /// measurement: no verdict instead of NOT reproduced.
    nan_is_missing: bool,
}

/// Scale note shown under each title.
fn subtitle(rep: &LabReport) -> String {
    format!("{}, seed {}", rep.scale.short(), rep.seed)
}

fn seed_ratio(claim: Claim) -> Option<f64> {
    match claim {
        Claim::Figures { off, on } if off > 0.0 && on > 0.0 => Some(on / off),
        Claim::Unchanged => Some(1.0),
        _ => None,
    }
}

/// A metric in the ratio chart: name, seed ratio, Shallow's ratio, verdict.
type RatioRow<'a> = (&'a str, Option<f64>, Option<f64>, Option<bool>);

/// The ratio chart's rows.
fn ratio_rows<'a>(rep: &'a LabReport, who: &Who) -> Vec<RatioRow<'a>> {
    rep.metrics
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                seed_ratio(m.claim),
                m.ratio().filter(|r| r.is_finite() && *r > 0.0),
                if who.nan_is_missing && (m.off.is_nan() || m.on.is_nan()) {
                    None
                } else {
                    m.reproduced()
                },
            )
        })
        .collect()
}

/// Horizontal bars of on/off per metric, log scale, seed beside Shallow.
fn ratio_svg(rep: &LabReport, who: &Who) -> Result<String, PlotError> {
    let rows = ratio_rows(rep, who);
    let n = rows.len().max(1);
    let vals = rows.iter().flat_map(|r| [r.1, r.2]).flatten();
    let (mut lo, mut hi) = (1.0f64, 1.0f64);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let (lo, hi) = (lo / 2.0, hi * 2.0);
    let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(10) as u32;
    let h = 180 + 56 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err("background"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: on/off ratio per metric ({})",
                    rep.experiment, who.subtitle
                ),
                ("sans-serif", 22),
            )
            .margin(15)
            .margin_right(190)
            .margin_bottom(35)
            .x_label_area_size(50)
            .y_label_area_size(20 + 8 * name_w)
            .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))
            .map_err(draw_err("axes"))?;
        let names: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
        let name_of = |y: &f64| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 {
                // Row 0 at the top.
                names.get(n - 1 - i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&name_of)
            .x_label_formatter(&|x| {
                // Only 1, 2 and 5 times a power of ten: the log axis stays legible.
                let m = x / 10f64.powf(x.log10().floor());
                if [1.0, 2.0, 5.0, 10.0].iter().any(|k| (m - k).abs() < 1e-6) {
                    format!("{}×", (x * 1e6).round() / 1e6)
                } else {
                    String::new()
                }
            })
            .label_style(("sans-serif", 15))
            .x_desc(
                "on / off (log scale): bars grow from 1 (no change), left = the mechanism lowers the metric, right = raises it",
            )
            .axis_desc_style(("sans-serif", 15))
            .draw()
            .map_err(draw_err("mesh"))?;
        let y_of = |i: usize| (n - 1 - i) as f64;
        let bar = |x: f64, y0: f64, y1: f64, c: RGBColor| {
            Rectangle::new([(1.0, y0), (x, y1)], c.filled())
        };
        chart
            .draw_series(
                rows.iter().enumerate().filter_map(|(i, r)| {
                    r.1.map(|s| bar(s, y_of(i) + 0.03, y_of(i) + 0.36, SEED_ON))
                }),
            )
            .map_err(draw_err("seed bars"))?;
        chart
            .draw_series(
                rows.iter().enumerate().filter_map(|(i, r)| {
                    r.2.map(|o| bar(o, y_of(i) - 0.36, y_of(i) - 0.03, OURS_ON))
                }),
            )
            .map_err(draw_err("Shallow bars"))?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(1.0, -0.5), (1.0, n as f64 - 0.5)],
                BLACK.stroke_width(2),
            )))
            .map_err(draw_err("unity line"))?;
        // Values and verdict in a column right of the plot, one line per metric; the legend
        // below the axis title (neither may hide a bar).
        let right = chart.backend_coord(&(hi, 0.0)).0 + 14;
        let ys: Vec<i32> = (0..rows.len())
            .map(|i| chart.backend_coord(&(hi, y_of(i))).1)
            .collect();
        let legend_at = (chart.backend_coord(&(lo, 0.0)).0, h as i32 - 20);
        ratio_labels(&root, &rows, who, right, &ys, legend_at)?;
        root.present().map_err(draw_err("present"))?;
    }
    Ok(svg)
}

/// The ratio chart's value and verdict column (at x `right`, a metric at each of `ys`) and
/// its legend (starting at `legend_at`).
fn ratio_labels(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    rows: &[RatioRow<'_>],
    who: &Who,
    right: i32,
    ys: &[i32],
    legend_at: (i32, i32),
) -> Result<(), PlotError> {
    let font = TextStyle::from(("sans-serif", 14).into_font()).pos(
        plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Left,
            plotters::style::text_anchor::VPos::Center,
        ),
    );
    for (r, &y) in rows.iter().zip(ys) {
        let verdict = match r.3 {
            Some(true) => "reproduced",
            Some(false) => "NOT reproduced",
            None if who.nan_is_missing && r.2.is_none() => "no off/on pair",
            None => "no published figure",
        };
        let ours = r.2.map_or("n/a".to_string(), fmt_ratio);
        let seed = r.1.map_or("-".to_string(), fmt_ratio);
        for (text, dy) in [
            (format!("seed {seed}"), -16),
            (format!("{} {ours}", who.short), 0),
            (verdict.to_string(), 16),
        ] {
            root.draw(&Text::new(text, (right, y + dy), font.clone()))
                .map_err(draw_err("labels"))?;
        }
    }
    let (lx, ly) = legend_at;
    for (k, (c, t)) in [
        (SEED_ON, "seed commit (Linux, published)"),
        (OURS_ON, who.long),
    ]
    .into_iter()
    .enumerate()
    {
        let x = lx + 330 * k as i32;
        root.draw(&Rectangle::new([(x, ly - 7), (x + 20, ly + 7)], c.filled()))
            .map_err(draw_err("legend"))?;
        root.draw(&Text::new(t, (x + 28, ly), font.clone()))
            .map_err(draw_err("legend"))?;
    }
    Ok(())
}

fn fmt_ratio(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}×")
    } else if x >= 1.0 {
        format!("{x:.2}×")
    } else if x >= 0.01 {
        format!("{x:.3}×")
    } else {
        format!("{x:.1e}×")
    }
}

/// One panel per metric: seed off/on and ours off/on in their unit.
fn metrics_svg(rep: &LabReport, who: &Who) -> Result<String, PlotError> {
    let n = rep.metrics.len().max(1);
    let cols = n.min(3);
    let rows = n.div_ceil(cols);
    let (w, h) = (420 * cols as u32, 110 + 340 * rows as u32);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err("background"))?;
        let root = root
            .titled(
                &format!(
                    "{}: every metric, mechanism off (light) vs on (dark): seed commit grey, {} blue ({})",
                    rep.experiment,
                    who.long,
                    who.subtitle
                ),
                ("sans-serif", 20),
            )
            .map_err(draw_err("title"))?;
        let panels = root.split_evenly((rows, cols));
        for (m, area) in rep.metrics.iter().zip(panels.iter()) {
            metric_panel(m, area, who.short)?;
        }
        root.present().map_err(draw_err("present"))?;
    }
    Ok(svg)
}

fn metric_panel(
    m: &crate::Metric,
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    who: &str,
) -> Result<(), PlotError> {
    let (so, sn) = match m.claim {
        Claim::Figures { off, on } => (Some(off), Some(on)),
        _ => (None, None),
    };
    let fin = |v: f64| v.is_finite().then_some(v);
    let bars: [(Option<f64>, RGBColor); 4] = [
        (so, SEED_OFF),
        (sn, SEED_ON),
        (fin(m.off), OURS_OFF),
        (fin(m.on), OURS_ON),
    ];
    let top = bars
        .iter()
        .filter_map(|b| b.0)
        .fold(0.0f64, |a, v| a.max(v.abs()))
        .max(1e-9)
        * 1.22;
    let caption = match m.claim {
        Claim::Unchanged => format!("{} [{}] (seed: unchanged)", m.name, m.unit),
        Claim::None => format!("{} [{}] (no seed figure)", m.name, m.unit),
        Claim::Figures { .. } => format!("{} [{}]", m.name, m.unit),
    };
    let mut chart = ChartBuilder::on(&area.margin(8, 8, 8, 8))
        .caption(caption, ("sans-serif", 14))
        .x_label_area_size(28)
        .y_label_area_size(62)
        .build_cartesian_2d(-0.5f64..3.5f64, 0f64..top)
        .map_err(draw_err("panel axes"))?;
    let labels = [
        "seed off".to_string(),
        "seed on".to_string(),
        format!("{who} off"),
        format!("{who} on"),
    ];
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(4)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && (0.0..4.0).contains(&i) {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| crate::fmt_num(*y))
        .light_line_style(WHITE)
        .y_desc(m.unit.as_str())
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(draw_err("panel mesh"))?;
    for (i, (v, c)) in bars.iter().enumerate() {
        let x = i as f64;
        match v {
            Some(v) => {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x - 0.35, 0.0), (x + 0.35, v.max(0.0))],
                        c.filled(),
                    )))
                    .map_err(draw_err("bar"))?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        crate::fmt_num(*v),
                        (x - 0.3, v.max(0.0) + top * 0.07),
                        ("sans-serif", 12).into_font(),
                    )))
                    .map_err(draw_err("bar label"))?;
            }
            None => {
                let t = if i < 2 && matches!(m.claim, Claim::Unchanged) {
                    "same"
                } else {
                    "-"
                };
                chart
                    .draw_series(std::iter::once(Text::new(
                        t,
                        (x - 0.12, top * 0.05),
                        ("sans-serif", 12).into_font(),
                    )))
                    .map_err(draw_err("bar label"))?;
            }
        }
    }
    Ok(())
}

/// A recorded chart: one line per arm.
fn chart_svg(experiment: &str, subtitle: &str, c: &Chart) -> Result<String, PlotError> {
    let pts = c.curves.iter().flat_map(|k| k.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() && (!c.log_x || x > 0.0) {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // Room around the data: a legend in the upper right sits above the curves, and on a log
    // axis the last curve keeps off the right edge.
    if c.log_x {
        x1 *= 1.5;
    }
    let y0 = y0.min(0.0);
    let head = if c.legend_lower_right { 1.08 } else { 1.25 };
    let y1 = if y1 <= y0 { y0 + 1.0 } else { y1 * head };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err("background"))?;
        let caption = format!("{experiment}: {} ({subtitle})", c.title);
        let mut b = ChartBuilder::on(&root);
        b.caption(caption, ("sans-serif", 20))
            .margin(15)
            .margin_right(30)
            .x_label_area_size(50)
            .y_label_area_size(80);
        if c.log_x {
            let mut chart = b
                .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(draw_err("axes"))?;
            draw_curves(&mut chart, c, &|x| crate::fmt_num(*x))?;
        } else {
            let tick = |v: &f64| format!("{}", (v * 1000.0).round() / 1000.0);
            let mut chart = b
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(draw_err("axes"))?;
            draw_curves(&mut chart, c, &tick)?;
        }
        root.present().map_err(draw_err("present"))?;
    }
    Ok(svg)
}

/// The axes (x ticks by `x_tick`), the curves and the legend of a recorded chart.
fn draw_curves<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    c: &Chart,
    x_tick: &dyn Fn(&f64) -> String,
) -> Result<(), PlotError>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .x_label_formatter(x_tick)
        .y_label_formatter(&|y| crate::fmt_num(*y))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(draw_err("mesh"))?;
    for k in &c.curves {
        let colour = ARM_COLOURS[k.group % ARM_COLOURS.len()];
        let pts: Vec<(f64, f64)> = k
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!c.log_x || *x > 0.0))
            .collect();
        // Off arms dashed, on arms solid: distinguishable without colour.
        let style = colour.stroke_width(3);
        let series = if k.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 10, 6, style))
                .map_err(draw_err("line"))?
        } else {
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(draw_err("line"))?
        };
        let dashed = k.dashed;
        series.label(k.label.as_str()).legend(move |(x, y)| {
            if dashed {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (9, 0)], colour.stroke_width(3))
                    + PathElement::new(vec![(15, 0), (24, 0)], colour.stroke_width(3))
            } else {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (12, 0)], colour.stroke_width(3))
                    + PathElement::new(vec![(12, 0), (24, 0)], colour.stroke_width(3))
            }
        });
    }
    chart
        .configure_series_labels()
        .position(if c.legend_lower_right {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperRight
        })
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err("legend"))?;
    Ok(())
}
