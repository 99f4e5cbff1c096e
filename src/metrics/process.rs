//! The standard process metrics, under the names every Prometheus client library uses
//! (`process_open_fds`, `process_max_fds`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_start_time_seconds`,
//! `process_cpu_seconds_total`), so stock dashboards and alerts work unchanged. Read from
//! `/proc/self` at scrape time with the `procfs` crate; a value the kernel does not give
//! is left out of the scrape rather than reported as 0. Elsewhere than Linux there are
//! none.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

/// Encodes this process's metrics on each scrape.
#[derive(Debug)]
pub(super) struct ProcessCollector;

#[cfg(target_os = "linux")]
impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use procfs::process::{LimitValue, Process};
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;

        let Ok(me) = Process::myself() else {
            return Ok(());
        };
        let mut gauge = |name: &str, help: &str, value: Option<f64>| match value {
            Some(value) => super::gauge(&mut encoder, name, help, value),
            None => Ok(()),
        };
        gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            me.fd_count().ok().map(|n| n as f64),
        )?;
        let max_fds = me
            .limits()
            .ok()
            .and_then(|l| match l.max_open_files.soft_limit {
                LimitValue::Value(n) => Some(n as f64),
                LimitValue::Unlimited => None,
            });
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors (the soft limit).",
            max_fds,
        )?;
        let stat = me.stat().ok();
        let ticks = procfs::ticks_per_second() as f64;
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            stat.as_ref().map(|s| (s.rss * procfs::page_size()) as f64),
        )?;
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            stat.as_ref().map(|s| s.vsize as f64),
        )?;
        let boot = procfs::boot_time_secs().ok();
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            stat.as_ref()
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.starttime as f64 / ticks),
        )?;
        if let Some(s) = &stat {
            let cpu = ConstCounter::new((s.utime + s.stime) as f64 / ticks);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?;
            cpu.encode(metric)?;
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
impl Collector for ProcessCollector {
    fn encode(&self, _: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}
