//! Prometheus metrics: one `Metrics` value holding one registry, created at startup and shared
//! by `Arc`. Label sets are bounded (warning reasons, resource kinds), never object names, paths
//! or addresses.
//!
//! This module knows only `prometheus`; the modules that observe things call its methods.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Every metric of the control plane.
pub struct Metrics {
    registry: Registry,
    pub table_generation: IntGauge,
    pub table_swaps_total: IntCounter,
    pub table_build_seconds: Histogram,
    /// From the first watch event of a batch to the table built from it being live.
    pub propagation_latency_seconds: Histogram,
    pub translate_warnings_total: IntCounterVec,
    pub watch_errors_total: IntCounterVec,
    pub relists_total: IntCounterVec,
    pub kube_events_total: IntCounterVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("switchyard".into()), None).unwrap_or_default();
        let fast_buckets = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ];
        let latency_buckets = vec![
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 1.5, 2.5, 5.0, 10.0,
        ];
        let m = Metrics {
            table_generation: IntGauge::new(
                "table_generation",
                "Generation of the routing table now serving",
            )
            .unwrap_or_else(|_| unreachable_metric()),
            table_swaps_total: IntCounter::new("table_swaps_total", "Routing tables swapped in")
                .unwrap_or_else(|_| unreachable_metric()),
            table_build_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "table_build_seconds",
                    "Time to translate objects into a routing table",
                )
                .buckets(fast_buckets),
            )
            .unwrap_or_else(|_| unreachable_metric()),
            propagation_latency_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "propagation_latency_seconds",
                    "Time from a watch event arriving to the table that includes it being live",
                )
                .buckets(latency_buckets),
            )
            .unwrap_or_else(|_| unreachable_metric()),
            translate_warnings_total: IntCounterVec::new(
                Opts::new(
                    "translate_warnings_total",
                    "Warnings raised while translating, by reason",
                ),
                &["reason"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            watch_errors_total: IntCounterVec::new(
                Opts::new(
                    "watch_errors_total",
                    "Errors of the Kubernetes watch, by resource",
                ),
                &["resource"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            relists_total: IntCounterVec::new(
                Opts::new(
                    "relists_total",
                    "Full re-lists of a watched resource after the first",
                ),
                &["resource"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            kube_events_total: IntCounterVec::new(
                Opts::new(
                    "kube_events_total",
                    "Kubernetes Events about Services, by outcome",
                ),
                &["outcome"],
            )
            .unwrap_or_else(|_| unreachable_metric()),
            registry,
        };
        let collectors: [Box<dyn prometheus::core::Collector>; 8] = [
            Box::new(m.table_generation.clone()),
            Box::new(m.table_swaps_total.clone()),
            Box::new(m.table_build_seconds.clone()),
            Box::new(m.propagation_latency_seconds.clone()),
            Box::new(m.translate_warnings_total.clone()),
            Box::new(m.watch_errors_total.clone()),
            Box::new(m.relists_total.clone()),
            Box::new(m.kube_events_total.clone()),
        ];
        for c in collectors {
            if let Err(e) = m.registry.register(c) {
                tracing::error!(error = %e, "metric registration failed");
            }
        }
        m
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Metric constructors only fail on invalid names or label sets, which are constants here; a
/// test below builds every metric, so this is never reached at run time.
#[track_caller]
fn unreachable_metric<T>() -> T {
    panic!("invalid metric definition")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_build_and_render_with_conventional_names() {
        let m = Metrics::new();
        m.table_swaps_total.inc();
        m.translate_warnings_total
            .with_label_values(&["InvalidAnnotation"])
            .inc();
        m.propagation_latency_seconds.observe(0.1);
        let text = m.render();
        assert!(text.contains("switchyard_table_swaps_total 1"), "{text}");
        assert!(
            text.contains("switchyard_translate_warnings_total{reason=\"InvalidAnnotation\"} 1")
        );
        assert!(text.contains("switchyard_propagation_latency_seconds_count 1"));
    }
}
