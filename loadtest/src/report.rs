//! The table: the seed's published figure, ours, their ratio, the target and whether it is
//! met; and `BENCHMARKS.md` around it.

use std::fmt::Write;

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: &'static str,
    pub metric: String,
    /// The Go waiting room's published figure, as text, and as a number when a ratio makes
    /// sense.
    pub seed: Option<(String, f64)>,
    pub ours: String,
    pub ours_value: f64,
    pub target: String,
    pub met: Option<bool>,
    /// Why a missed target is missed and what would close it.
    pub why: Option<String>,
}

impl Row {
    pub fn new(scenario: &'static str, metric: impl Into<String>, ours: f64, unit: &str) -> Row {
        Row {
            scenario,
            metric: metric.into(),
            seed: None,
            ours: fmt_value(ours, unit),
            ours_value: ours,
            target: String::new(),
            met: None,
            why: None,
        }
    }

    pub fn seed(mut self, text: &str, value: f64) -> Row {
        self.seed = Some((text.to_owned(), value));
        self
    }

    pub fn target(mut self, text: &str, met: bool) -> Row {
        self.target = text.to_owned();
        self.met = Some(met);
        self
    }

    pub fn why(mut self, missed: &str) -> Row {
        if self.met == Some(false) {
            self.why = Some(missed.to_owned());
        }
        self
    }
}

pub fn fmt_value(v: f64, unit: &str) -> String {
    let n = if v.abs() >= 1000.0 {
        group(v.round() as i64)
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if unit.is_empty() {
        n
    } else {
        format!("{n} {unit}")
    }
}

fn group(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// The table in Markdown.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| scenario | measure | seed (Go, M1 8-core) | ours | ours ÷ seed | target | met |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|\n");
    for r in rows {
        let (seed, ratio) = match &r.seed {
            Some((text, value)) if *value != 0.0 => {
                (text.clone(), format!("{:.2}", r.ours_value / value))
            }
            Some((text, _)) => (text.clone(), "—".into()),
            None => ("—".into(), "—".into()),
        };
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.scenario, r.metric, seed, r.ours, ratio, r.target, met
        );
    }
    out
}

/// Why each missed target is missed, as a list: every row whose target is not met, with
/// its reason when the scenario gave one; "every target is met" only when none is missed.
pub fn misses(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows.iter().filter(|r| r.met == Some(false)) {
        let why = r
            .why
            .as_deref()
            .unwrap_or("missed; no reason recorded by the scenario");
        let _ = writeln!(
            out,
            "- **{} — {}** ({}): {}",
            r.scenario, r.metric, r.ours, why
        );
    }
    if out.is_empty() {
        out.push_str("Every target is met in this run.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missed_target_without_a_reason_is_listed() {
        let rows = vec![
            Row::new("s", "met", 1.0, "").target("t", true),
            Row::new("s", "missed", 2.0, "").target("t", false),
        ];
        let text = misses(&rows);
        assert!(text.contains("s — missed"), "{text}");
        assert!(!text.contains("Every target is met"), "{text}");
        let met = misses(&rows[..1]);
        assert_eq!(met, "Every target is met in this run.\n");
    }
}
