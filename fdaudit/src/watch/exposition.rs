//! node_exporter's conventions for what `/metrics` returns, on top of prometheus-client's
//! encoding: the agent's own `process_*` metrics and `fdaudit_build_info`; series in a
//! stable order between scrapes (prometheus-client walks a hash map), a histogram's buckets
//! before its `_sum` and `_count`; and no float noise from summing seconds
//! (`0.15090329800000006` is written `0.150903298`).

use std::collections::BTreeMap;

use prometheus_client::{
    metrics::{
        counter::ConstCounter,
        family::Family,
        gauge::{ConstGauge, Gauge},
    },
    registry::Registry,
};

/// The agent's `process_*` metrics (as client_golang and node_exporter export them) and
/// `fdaudit_build_info`, read now.
pub fn self_metrics() -> Registry {
    let mut r = Registry::default();
    // A gauge of 1, as node_exporter's `*_build_info`: the text format 0.0.4 (and promtool)
    // know no `info` type.
    let build: Family<[(&'static str, &'static str); 1], Gauge> = Family::default();
    build
        .get_or_create(&[("version", env!("CARGO_PKG_VERSION"))])
        .set(1);
    r.register(
        "fdaudit_build_info",
        "fdaudit's version (the value is 1)",
        build,
    );
    let me = procfs_self();
    let gauge = |r: &mut Registry, name: &str, help: &str, v: Option<f64>| {
        if let Some(v) = v {
            r.register(name, help, ConstGauge::new(v));
        }
    };
    gauge(
        &mut r,
        "process_resident_memory_bytes",
        "Resident memory size in bytes",
        me.rss_bytes,
    );
    gauge(
        &mut r,
        "process_open_fds",
        "Number of open file descriptors",
        Some(crate::sys::count_open_fds() as f64),
    );
    gauge(
        &mut r,
        "process_max_fds",
        "Maximum number of open file descriptors (the soft RLIMIT_NOFILE)",
        crate::sys::nofile().ok().map(|(soft, _)| soft as f64),
    );
    gauge(
        &mut r,
        "process_start_time_seconds",
        "Start time of the process since the Unix epoch, seconds",
        me.start_time_seconds,
    );
    if let Some(cpu) = me.cpu_seconds {
        r.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent, seconds",
            ConstCounter::new(cpu),
        );
    }
    r
}

#[derive(Debug, Default)]
struct SelfStat {
    rss_bytes: Option<f64>,
    cpu_seconds: Option<f64>,
    start_time_seconds: Option<f64>,
}

/// This process's figures from /proc/self/stat (procfs-core's parser) and /proc/stat's boot
/// time.
fn procfs_self() -> SelfStat {
    use procfs_core::FromRead as _;
    let Ok(stat) = procfs_core::process::Stat::from_file("/proc/self/stat") else {
        return SelfStat::default();
    };
    // SAFETY: sysconf has no preconditions.
    let (tick, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as f64,
        )
    };
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    SelfStat {
        rss_bytes: Some(stat.rss as f64 * page),
        cpu_seconds: Some((stat.utime + stat.stime) as f64 / tick),
        start_time_seconds: boot.map(|b| b + stat.starttime as f64 / tick),
    }
}

/// Sorts each family's series by their labels (a histogram's lines stay together, buckets
/// first, then `_sum` and `_count`) and writes float values without summation noise.
pub fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut series: BTreeMap<String, Vec<(u8, String)>> = BTreeMap::new();
    let flush = |series: &mut BTreeMap<String, Vec<(u8, String)>>, out: &mut String| {
        for lines in series.values_mut() {
            lines.sort_by_key(|(rank, _)| *rank); // stable: buckets keep their order
            for (_, l) in lines.iter() {
                out.push_str(l);
                out.push('\n');
            }
        }
        series.clear();
    };
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut series, &mut out);
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let (key, rank) = series_key(line);
        series
            .entry(key)
            .or_default()
            .push((rank, round_value(line)));
    }
    flush(&mut series, &mut out);
    out
}

/// A sample's series (its labels less `le`) and its place in a histogram: buckets, then
/// `_sum`, then `_count` (everything else as a bucket).
fn series_key(line: &str) -> (String, u8) {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let labels = match line[name_end..].strip_prefix('{') {
        Some(rest) => rest.split('}').next().unwrap_or(""),
        None => "",
    };
    let kept: Vec<&str> = labels
        .split(',')
        .filter(|l| !l.is_empty() && !l.starts_with("le="))
        .collect();
    let rank = if name.ends_with("_sum") {
        1
    } else if name.ends_with("_count") {
        2
    } else {
        0
    };
    (kept.join(","), rank)
}

/// The line with its value rounded to 9 decimals when it has float noise (more digits than
/// the nanoseconds it was summed from).
fn round_value(line: &str) -> String {
    let Some((head, value)) = line.rsplit_once(' ') else {
        return line.to_owned();
    };
    match value.parse::<f64>() {
        Ok(v) if value.contains('.') && value.len() > 12 => {
            let rounded = (v * 1e9).round() / 1e9;
            format!("{head} {rounded:?}")
        }
        _ => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_sorted_and_histograms_keep_buckets_first() {
        let text = "# HELP a x\n# TYPE a counter\na_total{child=\"b\"} 2\na_total{child=\"a\"} 1\n\
                    # HELP w y\n# TYPE w histogram\nw_sum{s=\"z\"} 0.15090329800000006\n\
                    w_count{s=\"z\"} 2\nw_bucket{le=\"0.1\",s=\"z\"} 1\nw_bucket{le=\"+Inf\",s=\"z\"} 2\n\
                    w_sum{s=\"a\"} 1.0\nw_count{s=\"a\"} 1\nw_bucket{le=\"0.1\",s=\"a\"} 0\n\
                    w_bucket{le=\"+Inf\",s=\"a\"} 1\n# EOF\n";
        let want = "# HELP a x\n# TYPE a counter\na_total{child=\"a\"} 1\na_total{child=\"b\"} 2\n\
                    # HELP w y\n# TYPE w histogram\nw_bucket{le=\"0.1\",s=\"a\"} 0\n\
                    w_bucket{le=\"+Inf\",s=\"a\"} 1\nw_sum{s=\"a\"} 1.0\nw_count{s=\"a\"} 1\n\
                    w_bucket{le=\"0.1\",s=\"z\"} 1\nw_bucket{le=\"+Inf\",s=\"z\"} 2\n\
                    w_sum{s=\"z\"} 0.150903298\nw_count{s=\"z\"} 2\n# EOF\n";
        assert_eq!(tidy(text), want);
    }

    #[test]
    fn the_agent_describes_itself() {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self_metrics()).unwrap();
        for name in [
            "fdaudit_build_info{version=",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "process_cpu_seconds_total ",
        ] {
            assert!(out.contains(name), "{name} in {out}");
        }
    }
}
