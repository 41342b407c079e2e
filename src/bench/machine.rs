//! What every benchmark prints beside its figures: the command line and the machine.

/// The command line as run.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    format!("command: {}", args.join(" "))
}

/// Cores, CPU model (from /proc/cpuinfo) and kernel (from /proc/sys/kernel/osrelease).
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, m)| m.trim())
        .to_string();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".to_string(), |k| k.trim().to_string());
    format!("machine: {cores} cores, {model}, Linux {kernel}")
}

/// A field of /proc/`pid`/status in MB (`VmRSS`, `VmHWM`; `pid` may be `self`), 0 where
/// unreadable.
pub(crate) fn proc_status_mb(pid: &str, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
