//! `GET /metrics`: Prometheus text from the engine's figures and the server's counters.

use statelm_engine::EngineStats;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Mutex, PoisonError};

/// The server's own counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Responses by HTTP status.
    pub responses: Mutex<BTreeMap<u16, u64>>,
    /// Streams whose client went away before the end (their generation was cancelled).
    pub disconnects: AtomicU64,
    /// Streams running.
    pub streams_active: AtomicI64,
    /// Connections open.
    pub connections_open: AtomicI64,
    /// Connections refused at the connection cap.
    pub connections_refused: AtomicU64,
    /// Non-streaming requests whose client went away before the reply (cancelled).
    pub abandoned: AtomicU64,
}

impl Metrics {
    /// Counts a response.
    pub fn record(&self, status: u16) {
        *self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(status)
            .or_default() += 1;
    }
}

/// The `q` quantile (0..=1) of `values` (sorted here), or 0 when empty.
fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i.min(values.len() - 1)]
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP statelm_{name} {help}");
        let _ = writeln!(self.0, "# TYPE statelm_{name} {kind}");
    }

    fn metric(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.head(name, kind, help);
        let _ = writeln!(self.0, "statelm_{name} {value}");
    }

    fn line(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.0, "statelm_{name}{{{labels}}} {value}");
    }
}

/// A metric read from the engine's figures: name, help, value.
type EngineMetric = (&'static str, &'static str, fn(&EngineStats) -> f64);

const COUNTERS: &[EngineMetric] = &[
    (
        "requests_total",
        "Generations finished by the engine.",
        |s| s.requests_total as f64,
    ),
    (
        "prompt_tokens_total",
        "Prompt tokens of every request.",
        |s| s.prompt_tokens_total as f64,
    ),
    (
        "cached_tokens_total",
        "Prompt tokens reused from a State.",
        |s| s.cached_tokens_total as f64,
    ),
    ("generated_tokens_total", "Tokens generated.", |s| {
        s.generated_tokens_total as f64
    }),
    (
        "lookup_drafted_tokens_total",
        "Tokens drafted by prompt lookup.",
        |s| s.drafted_tokens_total as f64,
    ),
    (
        "lookup_accepted_tokens_total",
        "Drafted tokens accepted.",
        |s| s.accepted_tokens_total as f64,
    ),
    (
        "context_trims_total",
        "Context trims (budget and memory pressure).",
        |s| s.trims as f64,
    ),
    ("spills_total", "States spilled to disk.", |s| {
        s.spills as f64
    }),
    (
        "evictions_total",
        "Caches evicted under memory pressure.",
        |s| s.evictions as f64,
    ),
    ("restores_total", "States restored from disk.", |s| {
        s.restores as f64
    }),
    (
        "admission_refusals_total",
        "Requests refused for memory.",
        |s| s.admission_refusals as f64,
    ),
    (
        "memory_source_errors_total",
        "Failures of the memory sources watched (their level may be stale).",
        |s| s.memory_source_errors as f64,
    ),
    (
        "panics_total",
        "Engine steps that panicked (each failed its request and dropped its session).",
        |s| s.panics as f64,
    ),
];

const GAUGES: &[EngineMetric] = &[
    (
        "decode_tokens_per_second",
        "Mean decode speed, recent requests.",
        |s| s.mean_decode_tokens_per_s,
    ),
    (
        "time_to_first_token_seconds_mean",
        "Mean time to first token, recent requests.",
        |s| s.mean_time_to_first_token.as_secs_f64(),
    ),
    ("queue_depth", "Commands waiting for the engine.", |s| {
        s.queue_depth as f64
    }),
    ("active_generations", "Generations running.", |s| {
        s.active_generations as f64
    }),
    ("sessions", "Sessions in the engine.", |s| s.sessions as f64),
    ("spilled_sessions", "Sessions spilled to disk.", |s| {
        s.spilled as f64
    }),
    ("kv_bytes", "KV cache bytes of every resident State.", |s| {
        s.kv_bytes_total as f64
    }),
    ("state_bytes", "Bytes of every resident State.", |s| {
        s.state_bytes_total as f64
    }),
    ("weights_bytes", "Bytes of the mapped model file.", |s| {
        s.weights_bytes as f64
    }),
    (
        "budget_factor",
        "Token-budget factor (< 1 under pressure).",
        |s| s.budget_factor,
    ),
];

/// The server's own figures beside its counters: the gate's generations (running, waiting).
/// (The sessions are the engine's: `statelm_sessions`, `statelm_active_generations`.)
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    pub gate: (usize, usize),
}

/// Renders the metrics page.
pub(crate) fn render(s: &EngineStats, m: &Metrics, load: Load) -> String {
    let mut o = Out(String::new());
    for (kind, list) in [("counter", COUNTERS), ("gauge", GAUGES)] {
        for (name, help, value) in list {
            o.metric(name, kind, help, value(s));
        }
    }
    let mut ttft: Vec<f64> = (s.recent.iter())
        .map(|r| r.time_to_first_token.as_secs_f64())
        .collect();
    o.head(
        "time_to_first_token_seconds",
        "summary",
        "Time to first token, recent requests.",
    );
    for q in [0.5, 0.9, 0.99] {
        let value = quantile(&mut ttft, q);
        o.line(
            "time_to_first_token_seconds",
            &format!("quantile=\"{q}\""),
            value,
        );
    }
    if let Some(ceiling) = s.memory_ceiling {
        o.metric(
            "memory_ceiling_bytes",
            "gauge",
            "The engine's memory ceiling.",
            ceiling,
        );
    }
    o.head(
        "memory_pressure",
        "gauge",
        "The memory-pressure level the engine acted on.",
    );
    o.line(
        "memory_pressure",
        &format!("level=\"{}\"", s.pressure.as_str()),
        1,
    );
    render_server(&mut o, m, load);
    o.head(
        "http_responses_total",
        "counter",
        "HTTP responses by status.",
    );
    let responses = m.responses.lock().unwrap_or_else(PoisonError::into_inner);
    for (status, n) in responses.iter() {
        o.line("http_responses_total", &format!("status=\"{status}\""), n);
    }
    o.0
}

/// The server's own gauges and counters.
fn render_server(o: &mut Out, m: &Metrics, load: Load) {
    use std::sync::atomic::Ordering::Relaxed;
    let rows: [(&str, &str, &str, f64); 7] = [
        (
            "generations_running",
            "gauge",
            "Generations holding a slot.",
            load.gate.0 as f64,
        ),
        (
            "generations_waiting",
            "gauge",
            "Requests queued for a slot.",
            load.gate.1 as f64,
        ),
        (
            "client_disconnects_total",
            "counter",
            "Streams whose client left.",
            m.disconnects.load(Relaxed) as f64,
        ),
        (
            "requests_abandoned_total",
            "counter",
            "Non-streaming requests whose client left before the reply (cancelled).",
            m.abandoned.load(Relaxed) as f64,
        ),
        (
            "streams_active",
            "gauge",
            "Streaming responses in progress.",
            m.streams_active.load(Relaxed) as f64,
        ),
        (
            "connections_open",
            "gauge",
            "Open connections.",
            m.connections_open.load(Relaxed) as f64,
        ),
        (
            "connections_refused_total",
            "counter",
            "Connections refused at the connection cap.",
            m.connections_refused.load(Relaxed) as f64,
        ),
    ];
    for (name, kind, help, value) in rows {
        o.metric(name, kind, help, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let mut v = vec![3.0, 1.0, 2.0, 4.0, 5.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(quantile(&mut v, 0.99), 5.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn renders_prometheus_text() {
        let s = EngineStats {
            generated_tokens_total: 42,
            ..EngineStats::default()
        };
        let m = Metrics::default();
        m.record(200);
        m.record(200);
        let text = render(&s, &m, Load::default());
        assert!(
            text.contains("statelm_generated_tokens_total 42\n"),
            "{text}"
        );
        assert!(text.contains("statelm_http_responses_total{status=\"200\"} 2\n"));
        assert!(text.contains("# TYPE statelm_spills_total counter\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
