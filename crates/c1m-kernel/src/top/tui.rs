//! The terminal drawing of `c1m top` (ratatui over crossterm): sockets by state and counter
//! rates side by side, gauges for TCP memory and file handles, the doctor's findings below.
//! `ratatui::init` installs a panic hook that restores the terminal, so a crash never leaves
//! the user's ssh session in raw mode.

use super::model::{clock, Model, View};
use crate::doctor::checks::pct;
use crate::doctor::Status;
use anyhow::{Context, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Gauge, List, ListItem, Paragraph, Row, Table};
use ratatui::Frame;
use std::time::{Duration, Instant};

/// Runs the view until `q` / Esc / Ctrl-C, or `count` refreshes.
pub fn run(m: &mut Model, interval: Duration, count: Option<u64>) -> Result<u8> {
    let mut term = ratatui::init();
    let result = event_loop(&mut term, m, interval, count);
    ratatui::restore();
    result
}

fn event_loop(
    term: &mut ratatui::DefaultTerminal,
    m: &mut Model,
    interval: Duration,
    count: Option<u64>,
) -> Result<u8> {
    let mut n = 0u64;
    loop {
        let v = m.tick()?;
        term.draw(|f| draw(f, &v, interval)).context("drawing")?;
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(0);
        }
        let next = Instant::now() + interval;
        // Wait for the next tick, answering keys (and resizes, by redrawing) meanwhile.
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if !event::poll(left).context("reading terminal events")? {
                break;
            }
            match event::read().context("reading terminal events")? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(0);
                    }
                }
                Event::Resize(..) => {
                    term.draw(|f| draw(f, &v, interval)).context("drawing")?;
                }
                _ => {}
            }
        }
    }
}

fn status_style(s: Status) -> Style {
    match s {
        Status::Fail => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        Status::Warn => Style::default().fg(Color::Yellow),
        _ => Style::default().fg(Color::Green),
    }
}

fn draw(f: &mut Frame, v: &View, interval: Duration) {
    let rows = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(16),
        Constraint::Length(2),
        Constraint::Min(3),
    ])
    .split(f.area());
    let title = Line::from(vec![
        Span::styled("c1m top ", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "{}  every {:.1}s  {} TCP sockets  (q quits)",
            clock(),
            interval.as_secs_f64(),
            v.total_sockets
        )),
    ]);
    f.render_widget(Paragraph::new(title), rows[0]);

    let cols =
        Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).split(rows[1]);
    let states: Vec<Row> = v
        .states
        .iter()
        .map(|(n, c)| Row::new(vec![n.clone(), c.to_string()]))
        .collect();
    f.render_widget(
        Table::new(states, [Constraint::Length(13), Constraint::Min(8)])
            .header(Row::new(vec!["STATE", "COUNT"]).style(Style::default().fg(Color::Cyan)))
            .block(Block::default().borders(Borders::ALL).title("sockets")),
        cols[0],
    );
    let rates: Vec<Row> = v
        .rates
        .iter()
        .map(|(n, r)| {
            let style = if *r > 0.0 && !matches!(*n, "ActiveOpens" | "PassiveOpens") {
                Style::default().fg(Color::Yellow)
            } else {
                Style::default()
            };
            Row::new(vec![n.to_string(), format!("{r:.1}")]).style(style)
        })
        .collect();
    f.render_widget(
        Table::new(rates, [Constraint::Length(17), Constraint::Min(8)])
            .header(Row::new(vec!["COUNTER", "PER SEC"]).style(Style::default().fg(Color::Cyan)))
            .block(Block::default().borders(Borders::ALL).title("TCP counters")),
        cols[1],
    );

    draw_gauges(f, v, rows[2]);

    let mut items: Vec<ListItem> = v
        .findings
        .iter()
        .map(|fi| {
            let mut lines = vec![Line::from(vec![
                Span::styled(format!("{:<5}", fi.status.label()), status_style(fi.status)),
                Span::raw(format!(" {:<20} {}", fi.check, fi.summary)),
            ])];
            for cmd in fi.fix.iter().take(2) {
                lines.push(Line::from(format!("      fix: {cmd}")));
            }
            ListItem::new(lines)
        })
        .collect();
    for e in &v.errors {
        items.push(ListItem::new(Line::styled(
            format!("error: {e}"),
            Style::default().fg(Color::Red),
        )));
    }
    let title = match v.findings_age {
        None => "doctor (first run pending)".to_string(),
        Some(_) if v.findings.is_empty() => "doctor: all checks pass".to_string(),
        Some(age) => format!("doctor findings ({:.0}s ago)", age.as_secs_f64()),
    };
    f.render_widget(
        List::new(items).block(Block::default().borders(Borders::ALL).title(title)),
        rows[3],
    );
}

fn draw_gauges(f: &mut Frame, v: &View, area: Rect) {
    let g = Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).split(area);
    if let Some((mem, m)) = v.tcp_mem {
        let p = pct(mem, m[2]).min(100);
        let color = if mem >= m[1] {
            Color::Red
        } else if mem >= m[0] {
            Color::Yellow
        } else {
            Color::Green
        };
        f.render_widget(
            Gauge::default()
                .gauge_style(Style::default().fg(color))
                .percent(p as u16)
                .label(format!(
                    "tcp mem {mem} pages of max {} (pressure at {})",
                    m[2], m[1]
                )),
            g[0],
        );
    }
    if let Some((a, m)) = v.files {
        f.render_widget(
            Gauge::default()
                .gauge_style(Style::default().fg(Color::Blue))
                .percent(pct(a, m).min(100) as u16)
                .label(format!("file handles {a} of file-max {m}")),
            g[1],
        );
    }
}
