//! `--plot FILE.svg`: online connections (top) and per-second p99 latency of connect and
//! delivery (bottom) over time, as a hand-written SVG with no dependencies.

use crate::coordinator::Run;
use crate::report::thousands;

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
        run.args.proto.name(),
        xml_escape(&run.args.url),
        thousands(run.args.conns)
    ));
    s.push_str(&axes(
        top1,
        "online connections",
        &thousands(online_max as u64),
        x_max,
    ));
    let online: Vec<(f64, f64)> = tl.iter().map(|p| (p.t_s, p.online as f64)).collect();
    s.push_str(&polyline(&online, x_max, online_max, top1, "#1f77b4"));
    s.push_str(&axes(
        top2,
        "p99 latency per second (blue: connect, red: delivery)",
        &format!("{lat_max:.1} ms"),
        x_max,
    ));
    let connect: Vec<(f64, f64)> = tl
        .iter()
        .filter(|p| p.connect_p99_us > 0)
        .map(|p| (p.t_s, p.connect_p99_us as f64 / 1000.0))
        .collect();
    let delivery: Vec<(f64, f64)> = tl
        .iter()
        .filter(|p| p.delivery_p99_us > 0)
        .map(|p| (p.t_s, p.delivery_p99_us as f64 / 1000.0))
        .collect();
    s.push_str(&polyline(&connect, x_max, lat_max, top2, "#1f77b4"));
    s.push_str(&polyline(&delivery, x_max, lat_max, top2, "#d62728"));
    s.push_str("</svg>\n");
    s
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
