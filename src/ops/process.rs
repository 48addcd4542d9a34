//! The `process_*` metrics every Prometheus client library exports (CPU seconds, resident and
//! virtual memory, open and maximum file descriptors, threads, start time), read from
//! `/proc/self` at scrape time, with the names and meanings of the Go client's collector so
//! that dashboards built for those work unchanged (hence no `switchyard_` prefix).
//!
//! The prometheus crate has this collector behind its `process` feature, but that feature
//! needs the `procfs` crate, which is not in the crate cache this project builds from offline;
//! the four files it reads are simple enough to read here. Where they are missing (not Linux),
//! nothing is exported. This module reads files only; it must not touch routing.

use std::fs;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

/// Clock ticks per second of `/proc/<pid>/stat` times: `USER_HZ`, which the kernel fixes at
/// 100 in what it exports to user space on every architecture Linux supports.
const TICKS_PER_SECOND: f64 = 100.0;

/// What one reading of `/proc/self` found.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub threads: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
    pub max_fds: Option<f64>,
}

/// Reads `/proc/self`; `None` where there is no such thing.
pub fn read() -> Option<Reading> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let boot = fs::read_to_string("/proc/stat").ok()?;
    let limits = fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let mut r = parse(&stat, &status, &boot, &limits)?;
    r.open_fds = fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as f64;
    Some(r)
}

/// The fields of `/proc/self/stat` (after the command name, which may hold spaces and
/// parentheses), `/proc/self/status`, `/proc/stat` and `/proc/self/limits`.
fn parse(stat: &str, status: &str, boot: &str, limits: &str) -> Option<Reading> {
    // Fields 3.. of proc(5), so field n is at index n - 3.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let num = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse::<f64>().ok() };
    let kib = |key: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let v: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(v * 1024.0)
    };
    let btime: f64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok());
    Some(Reading {
        cpu_seconds: (num(14)? + num(15)?) / TICKS_PER_SECOND,
        resident_bytes: kib("VmRSS:")?,
        virtual_bytes: num(23)?,
        threads: num(20)?,
        start_time_seconds: btime + num(22)? / TICKS_PER_SECOND,
        open_fds: 0.0,
        max_fds,
    })
}

/// The collector: one set of series, refreshed at every scrape.
pub struct ProcessCollector {
    cpu: Counter,
    resident: Gauge,
    virtual_memory: Gauge,
    threads: Gauge,
    start_time: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
}

impl ProcessCollector {
    /// `None` only if a constant metric definition were invalid.
    pub fn new() -> Option<ProcessCollector> {
        let g = |name: &str, help: &str| Gauge::with_opts(Opts::new(name, help)).ok();
        Some(ProcessCollector {
            cpu: Counter::with_opts(Opts::new(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds",
            ))
            .ok()?,
            resident: g(
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
            )?,
            virtual_memory: g(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
            )?,
            threads: g("process_threads", "Number of OS threads in the process")?,
            start_time: g(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
            )?,
            open_fds: g("process_open_fds", "Number of open file descriptors")?,
            max_fds: g("process_max_fds", "Maximum number of open file descriptors")?,
        })
    }

    fn all(&self) -> [&dyn Collector; 7] {
        [
            &self.cpu,
            &self.resident,
            &self.virtual_memory,
            &self.threads,
            &self.start_time,
            &self.open_fds,
            &self.max_fds,
        ]
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.all().into_iter().flat_map(|c| c.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(r) = read() else {
            return Vec::new();
        };
        // A counter only goes up: add what was spent since the last scrape.
        let spent = r.cpu_seconds - self.cpu.get();
        if spent > 0.0 {
            self.cpu.inc_by(spent);
        }
        self.resident.set(r.resident_bytes);
        self.virtual_memory.set(r.virtual_bytes);
        self.threads.set(r.threads);
        self.start_time.set(r.start_time_seconds);
        self.open_fds.set(r.open_fds);
        // `max_fds` is last in `all()`: left out, rather than 0, when no limit is known.
        let mut out: Vec<MetricFamily> = self
            .all()
            .into_iter()
            .take(6)
            .flat_map(|c| c.collect())
            .collect();
        if let Some(m) = r.max_fds {
            self.max_fds.set(m);
            out.extend(self.max_fds.collect());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 \
                    7 0 12345 104857600 2560 18446744073709551615";
        let status = "Name:\tx\nVmSize:\t  102400 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let r = parse(stat, status, boot, limits).unwrap();
        assert_eq!(r.cpu_seconds, 3.0);
        assert_eq!(r.resident_bytes, 10240.0 * 1024.0);
        assert_eq!(r.virtual_bytes, 104_857_600.0);
        assert_eq!(r.threads, 7.0);
        assert_eq!(r.start_time_seconds, 1_700_000_000.0 + 123.45);
        assert_eq!(r.max_fds, Some(1024.0));
        assert!(parse("garbage", status, boot, limits).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read() {
        let r = read().unwrap();
        assert!(
            r.resident_bytes > 0.0 && r.threads >= 1.0 && r.open_fds >= 3.0,
            "{r:?}"
        );
        let c = ProcessCollector::new().unwrap();
        let names: Vec<String> = c.collect().iter().map(|f| f.name().to_string()).collect();
        assert!(
            names.contains(&"process_cpu_seconds_total".to_string()),
            "{names:?}"
        );
        assert!(names.contains(&"process_open_fds".to_string()), "{names:?}");
    }
}
