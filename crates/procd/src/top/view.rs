//! Draws the model: a header, one row per session, the log pane when it
//! is open, and a bottom line with the keys or the question being asked.
//! Any size fits: columns shrink and the last line is cut, nothing wraps.

use super::model::{Link, Model, Prompt, Row};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table, TableState};
use ratatui::Frame;

const KEYS: &str = "↑/↓ select  l log  a attach  s send  k kill  r restart  / filter  q quit";

/// What persists between frames: the table's scroll position.
#[derive(Default)]
pub struct View {
    table: TableState,
}

impl View {
    pub fn draw(&mut self, frame: &mut Frame, model: &Model) {
        let area = frame.area();
        let log_height = match &model.log {
            Some(_) => area.height.saturating_sub(2) * 2 / 5,
            None => 0,
        };
        let [header, table, log, footer] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(0),
            Constraint::Length(log_height),
            Constraint::Length(1),
        ])
        .areas(area);
        frame.render_widget(Paragraph::new(header_line(model)), header);
        self.draw_table(frame, model, table);
        if let Some(pane) = &model.log {
            let label = model
                .visible()
                .find(|r| r.entry.session_id == pane.session_id)
                .map(Row::label)
                .unwrap_or_else(|| pane.session_id.clone());
            let block = Block::default()
                .borders(Borders::TOP)
                .title(format!(" log: {label} (l or Esc closes) "));
            let inner = block.inner(log).height as usize;
            let lines: Vec<String> = pane.shown().collect();
            let tail = lines[lines.len().saturating_sub(inner)..]
                .iter()
                .map(|l| Line::raw(l.as_str()))
                .collect::<Vec<_>>();
            frame.render_widget(Paragraph::new(tail).block(block), log);
        }
        frame.render_widget(Paragraph::new(footer_line(model)), footer);
    }

    fn draw_table(&mut self, frame: &mut Frame, model: &Model, area: Rect) {
        let header = TableRow::new([
            "NAME",
            "PROJECT",
            "STATE",
            "READY",
            "INPUT",
            "PORTS",
            "CPU",
            "MEM",
            "UP",
            "LAST LINE",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD));
        let rows: Vec<TableRow> = model.visible().map(row).collect();
        let widths = [
            Constraint::Length(18),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(11),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Fill(1),
        ];
        if rows.is_empty() {
            let text = match model.filter.is_empty() {
                true => "no sessions",
                false => "no session matches the filter",
            };
            let [head, rest] =
                Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
            frame.render_widget(
                Table::new(Vec::<TableRow>::new(), widths).header(header),
                head,
            );
            frame.render_widget(Paragraph::new(text), rest);
            return;
        }
        self.table.select(model.selected_index());
        let table = Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
        frame.render_stateful_widget(table, area, &mut self.table);
    }
}

fn header_line(model: &Model) -> Line<'static> {
    let (running, finished) = model.counts();
    let mut spans = vec![
        Span::styled("procd top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("  {running} running, {finished} finished")),
    ];
    if let Some(js) = model.jobserver.as_ref().filter(|js| js.in_use > 0) {
        let holders: Vec<String> = js
            .sessions
            .iter()
            .map(|s| format!("{} {}", s.session_id, s.tokens))
            .collect();
        spans.push(Span::raw(format!(
            "  jobserver {}/{} ({})",
            js.in_use,
            js.tokens,
            holders.join(", ")
        )));
    }
    if !model.filter.is_empty() {
        spans.push(Span::raw(format!("  filter: {}", model.filter)));
    }
    match &model.link {
        Link::Up => {}
        Link::Connecting => spans.push(Span::raw("  connecting…")),
        Link::Lost { since } => spans.push(Span::styled(
            format!(
                "  daemon lost {}s ago; reconnecting…",
                since.elapsed().as_secs()
            ),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )),
    }
    Line::from(spans)
}

fn footer_line(model: &Model) -> Line<'static> {
    match &model.prompt {
        Prompt::Filter => Line::raw(format!(
            "filter: {}▏ (Enter keeps, Esc clears)",
            model.filter
        )),
        Prompt::Send { text, .. } => Line::raw(format!("send: {text}▏ (Enter sends, Esc cancels)")),
        Prompt::ConfirmKill { label, .. } => Line::styled(
            format!("kill {label} and everything it started? y/n"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        Prompt::None => match &model.notice {
            Some(notice) => Line::from(vec![
                Span::styled(notice.clone(), Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!("   {KEYS}")),
            ]),
            None => Line::raw(KEYS),
        },
    }
}

fn row(r: &Row) -> TableRow<'static> {
    let e = &r.entry;
    let state = crate::render::state(e);
    let ready = match e.activity.ready {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    let input = if e.activity.waiting_for_input {
        "wait"
    } else {
        ""
    };
    let ports = e
        .activity
        .ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let (cpu, mem) = match r.running() {
        true => (
            r.cpu_percent
                .map(|p| format!("{p:.0}%"))
                .unwrap_or_else(|| "-".into()),
            bytes(e.activity.resources.rss_bytes),
        ),
        false => ("".into(), "".into()),
    };
    let style = match r.running() {
        true => Style::new(),
        false => Style::new().add_modifier(Modifier::DIM),
    };
    TableRow::new([
        Cell::from(r.label()),
        Cell::from(e.project.clone().unwrap_or_default()),
        Cell::from(state),
        Cell::from(ready),
        Cell::from(input),
        Cell::from(ports),
        Cell::from(cpu),
        Cell::from(mem),
        Cell::from(duration(e.uptime_seconds)),
        Cell::from(r.last_line()),
    ])
    .style(style)
}

/// "512K", "12.3M", "1.5G".
fn bytes(n: u64) -> String {
    let n = n as f64;
    match n {
        n if n >= (1u64 << 30) as f64 => format!("{:.1}G", n / (1u64 << 30) as f64),
        n if n >= (1u64 << 20) as f64 => format!("{:.1}M", n / (1u64 << 20) as f64),
        n => format!("{:.0}K", n / 1024.0),
    }
}

/// "42s", "3m04s", "2h05m", "3d04h".
fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_forms() {
        assert_eq!(duration(42.9), "42s");
        assert_eq!(duration(184.0), "3m04s");
        assert_eq!(duration(7500.0), "2h05m");
        assert_eq!(duration(86400.0 * 3.0 + 4.0 * 3600.0), "3d04h");
        assert_eq!(bytes(512 * 1024), "512K");
        assert_eq!(bytes(12 * 1024 * 1024 + 300 * 1024), "12.3M");
        assert_eq!(bytes(3 << 29), "1.5G");
    }
}
