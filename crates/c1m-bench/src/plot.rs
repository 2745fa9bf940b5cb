//! `--plot FILE.svg`: online connections (top, linear) and per-second p99 latency of connect
//! and delivery (bottom, log scale: connects take µs to ms, deliveries to a million take up to
//! seconds, and both must be readable on one axis), as a hand-written SVG with no dependencies.

use crate::human::thousands;
use crate::run::{Run, Sample};

const W: f64 = 900.0;
const H: f64 = 260.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;

fn polyline(points: &[(f64, f64)], x_max: f64, y_max: f64, top: f64, color: &str) -> String {
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| {
            let px = LEFT + x / x_max.max(1e-9) * (W - LEFT - RIGHT);
            let py = top + H - y / y_max.max(1e-9) * H;
            format!("{px:.1},{py:.1}")
        })
        .collect();
    format!(
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n",
        pts.join(" ")
    )
}

fn axes(top: f64, title: &str, y_label: &str, x_max: f64) -> String {
    let mut s = format!(
        "<text x=\"{LEFT}\" y=\"{:.0}\" font-size=\"14\" font-weight=\"bold\">{title}</text>\n",
        top - 8.0
    );
    s.push_str(&format!(
        "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{}\" height=\"{H}\" fill=\"none\" stroke=\"#999\"/>\n",
        W - LEFT - RIGHT
    ));
    s.push_str(&format!(
        "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\" text-anchor=\"end\">{y_label}</text>\n",
        LEFT - 6.0,
        top + 10.0
    ));
    s.push_str(&format!(
        "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\" text-anchor=\"end\">{:.0} s</text>\n",
        W - RIGHT,
        top + H + 14.0,
        x_max
    ));
    s.push_str(&format!(
        "<text x=\"{LEFT}\" y=\"{:.0}\" font-size=\"11\">0 s</text>\n",
        top + H + 14.0
    ));
    s
}

/// Per-agent ramp colours (the total stays blue).
const AGENT_COLORS: [&str; 6] = [
    "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

pub fn svg(run: &Run) -> String {
    let tl = &run.timeline;
    let x_max = tl.last().map(|s| s.t_s).unwrap_or(1.0).max(1.0);
    let online_max = tl.iter().map(|s| s.online).max().unwrap_or(0).max(1) as f64;
    let lat_max = tl
        .iter()
        .map(|s| s.connect_p99_us.max(s.delivery_p99_us))
        .max()
        .unwrap_or(0)
        .max(1) as f64
        / 1000.0;
    let top1 = 40.0;
    let top2 = top1 + H + 70.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{:.0}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        top2 + H + 50.0
    );
    s.push_str(&format!(
        "<text x=\"{LEFT}\" y=\"18\" font-size=\"12\">c1m bench · {} · {} · {} connections</text>\n",
        run.args.proto().name(),
        xml_escape(&run.args.url),
        thousands(run.args.conns)
    ));
    s.push_str(&axes(
        top1,
        "online connections",
        &thousands(online_max as u64),
        x_max,
    ));
    let online: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
        .chain(tl.iter().map(|p| (p.t_s, p.online as f64)))
        .collect();
    for frac in [0.25, 0.5, 0.75] {
        let y = top1 + H - frac * H;
        s.push_str(&format!(
            "<line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.0}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            thousands((online_max * frac) as u64)
        ));
    }
    s.push_str(&polyline(&online, x_max, online_max, top1, "#1f77b4"));
    // A run on agents: each agent's ramp beside the total, with a legend.
    let agents = run.fleet.as_ref().map_or(0, |f| f.agents.len());
    for a in 0..agents {
        let color = AGENT_COLORS[a % AGENT_COLORS.len()];
        let pts: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
            .chain(
                tl.iter()
                    .filter_map(|p| Some((p.t_s, *p.agents_online.get(a)? as f64))),
            )
            .collect();
        s.push_str(&polyline(&pts, x_max, online_max, top1, color));
        let lost = run
            .fleet
            .as_ref()
            .and_then(|f| f.agents[a].lost.as_ref())
            .is_some();
        s.push_str(&format!(
            "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\" fill=\"{color}\">agent {a}{}</text>\n",
            LEFT + 8.0 + 90.0 * a as f64,
            top1 + 14.0,
            if lost { " (lost)" } else { "" }
        ));
    }
    if agents > 0 {
        s.push_str(&format!(
            "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\" fill=\"#1f77b4\">total</text>\n",
            LEFT + 8.0 + 90.0 * agents as f64,
            top1 + 14.0
        ));
    }
    s.push_str(&axes(
        top2,
        "p99 latency per second, log scale (blue: connect, red: delivery)",
        "",
        x_max,
    ));
    // Decades from 0.1 ms up to the first power of ten above the largest value.
    let top_decade = lat_max.max(1.0).log10().ceil().max(0.0) as i32;
    let (lo, hi) = (-1.0f64, f64::from(top_decade));
    for d in -1..=top_decade {
        let y = top2 + H - (f64::from(d) - lo) / (hi - lo) * H;
        let label = match d {
            -1 => "0.1 ms".to_string(),
            0..=2 => format!("{} ms", 10i64.pow(d as u32)),
            _ => format!("{} s", 10i64.pow((d - 3) as u32)),
        };
        s.push_str(&format!(
            "<line x1=\"{LEFT}\" x2=\"{:.0}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n<text x=\"{:.0}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{label}</text>\n",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0
        ));
    }
    let log_pts = |f: &dyn Fn(&Sample) -> u64| -> Vec<(f64, f64)> {
        tl.iter()
            .filter(|p| f(p) > 0)
            .map(|p| {
                let ms = (f(p) as f64 / 1000.0).max(0.1);
                (p.t_s, ms.log10() - lo)
            })
            .collect()
    };
    let connect = log_pts(&|p| p.connect_p99_us);
    let delivery = log_pts(&|p| p.delivery_p99_us);
    s.push_str(&polyline(&connect, x_max, hi - lo, top2, "#1f77b4"));
    s.push_str(&polyline(&delivery, x_max, hi - lo, top2, "#d62728"));
    for (x, y) in &delivery {
        let px = LEFT + x / x_max * (W - LEFT - RIGHT);
        let py = top2 + H - y / (hi - lo) * H;
        s.push_str(&format!(
            "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"2.5\" fill=\"#d62728\"/>\n"
        ));
    }
    s.push_str("</svg>\n");
    s
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
