//! Whether a scenario ran on a quiet machine.
//!
//! The 1-minute load average counts the bench itself: PostgreSQL and the bench's client keep
//! both cores busy during a drain, so the load after a scenario is always above 1.0 and says
//! nothing about other work. Two checks instead:
//! - **before**: wait (at most [`SETTLE`]) until the 1-minute load is at or below the noisy
//!   threshold (`report::NOISY_LOAD`), so the scenario starts on a quiet machine;
//! - **during**: the CPU that *other* processes used — the machine's busy time
//!   (`/proc/stat`) minus the bench's own (this process and its waited-for children) and the
//!   services it drives (PostgreSQL, Redis, NATS, RabbitMQ), each with its reaped children —
//!   averaged over the scenario, in cores; time the hypervisor stole is not counted. Above [`OTHERS_MAX`] the row is noisy: a build or a test run beside the bench.

use std::time::Duration;

use outboxkit_core::Stopwatch;

/// The longest the bench waits for the load to settle before a scenario.
pub const SETTLE: Duration = Duration::from_secs(120);

/// The most CPU (in cores, averaged over the scenario) other processes may use for its rows
/// to count as measured.
pub const OTHERS_MAX: f64 = 0.25;

/// Kernel clock ticks per second of `/proc` CPU times (`CLK_TCK`, 100 on Linux).
const TICKS: f64 = 100.0;

/// The processes the bench drives: their CPU is the scenario's, not noise.
const SERVICES: &[&str] = &["postgres", "redis-server", "nats-server", "beam.smp"];

/// Busy ticks of the whole machine and of the bench with its services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticks {
    machine: u64,
    ours: u64,
}

impl Ticks {
    /// Read `/proc` now (zeros when unreadable: then nothing is ever noisy by CPU).
    fn now() -> Self {
        Ticks {
            machine: machine_busy().unwrap_or(0),
            ours: ours_busy(),
        }
    }
}

/// The CPU counts at the start of a scenario, and its stopwatch.
#[derive(Debug)]
pub struct Sample {
    ticks: Ticks,
    sw: Stopwatch,
}

impl Sample {
    /// Start counting now.
    pub fn now() -> Self {
        Sample {
            ticks: Ticks::now(),
            sw: Stopwatch::start(),
        }
    }

    /// The cores other processes used on average since `self`.
    pub fn others_since(&self) -> f64 {
        let secs = self.sw.elapsed().as_secs_f64();
        others_cores(self.ticks, Ticks::now(), secs)
    }
}

/// The cores other processes used between two counts `secs` apart.
fn others_cores(start: Ticks, end: Ticks, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    let machine = end.machine.saturating_sub(start.machine) as f64;
    let ours = end.ours.saturating_sub(start.ours) as f64;
    ((machine - ours).max(0.0) / TICKS) / secs
}

/// Wait until the 1-minute load is at or below `threshold`, at most [`SETTLE`]; returns the
/// load then.
pub async fn settle(load: impl Fn() -> Option<f64>, threshold: f64) -> Option<f64> {
    let start = Stopwatch::start();
    loop {
        let l = load();
        if l.is_none_or(|l| l <= threshold) || start.elapsed() >= SETTLE {
            return l;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// The busy ticks in the first line of `/proc/stat` (user, nice, system, irq, softirq; not
/// idle, iowait or steal).
fn machine_busy() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

pub(crate) fn parse_cpu_line(line: &str) -> Option<u64> {
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (steal is the hypervisor's, not ours)
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6))
}

/// utime + stime (+ the waited-for children's, when `children`) of one `/proc/<pid>/stat`
/// line, and its command name.
pub(crate) fn parse_proc_stat(stat: &str, children: bool) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // Fields after the name: state(0) … utime(11) stime(12) cutime(13) cstime(14).
    let num = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let mut ticks = num(11) + num(12);
    if children {
        ticks += num(13) + num(14);
    }
    Some((comm, ticks))
}

/// CPU time of this process and of the PostgreSQL server (every `postgres` process with its
/// reaped children, so the backends of connections closed in between still count), in ticks:
/// a count the machine's load moves far less than a rate (issue 33's drain rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// This process (the client: dispatcher, driver).
    pub client: u64,
    /// The PostgreSQL server.
    pub server: u64,
}

impl CpuTicks {
    /// Read `/proc` now.
    pub fn now() -> Self {
        CpuTicks {
            client: own_ticks(),
            server: service_ticks(&["postgres"]),
        }
    }

    /// Microseconds of CPU per unit of work since `before`: (client, server).
    pub fn per_unit_since(&self, before: &CpuTicks, units: u64) -> (f64, f64) {
        let us = |t: u64| 1e6 * t as f64 / TICKS / units.max(1) as f64;
        (
            us(self.client.saturating_sub(before.client)),
            us(self.server.saturating_sub(before.server)),
        )
    }
}

fn own_ticks() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_proc_stat(&s, true))
        .map_or(0, |(_, t)| t)
}

/// utime + stime of every process whose name starts with one of `names` (not this one), each
/// with its waited-for children.
fn service_ticks(names: &[&str]) -> u64 {
    let own_pid = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| e.file_name().to_string_lossy() != own_pid)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_proc_stat(&s, true))
        .filter(|(comm, _)| names.iter().any(|s| comm.starts_with(s)))
        .map(|(_, t)| t)
        .sum()
}

/// This process and every service process, each with its waited-for children: PostgreSQL's
/// postmaster reaps the backends of closed connections, so their CPU stays counted as ours.
fn ours_busy() -> u64 {
    own_ticks() + service_ticks(SERVICES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ticks_leave_idle_iowait_and_steal_out() {
        let line = "cpu  100 5 50 9000 40 3 2 1 0 0";
        assert_eq!(parse_cpu_line(line), Some(100 + 5 + 50 + 3 + 2));
    }

    #[test]
    fn a_proc_stat_line_gives_its_name_and_cpu() {
        let s = "4242 (postgres: bench) S 1 2 3 4 5 6 7 8 9 10 30 20 7 3 20 0 1 0";
        assert_eq!(
            parse_proc_stat(s, false),
            Some(("postgres: bench".into(), 50))
        );
        assert_eq!(
            parse_proc_stat(s, true),
            Some(("postgres: bench".into(), 60))
        );
    }

    #[test]
    fn others_are_the_machine_minus_ours_per_second() {
        let a = Ticks {
            machine: 1_000,
            ours: 400,
        };
        let b = Ticks {
            machine: 3_000,
            ours: 2_150,
        };
        // 2,000 busy ticks, 1,750 ours: 250 ticks = 2.5 s of CPU over 10 s.
        assert!((others_cores(a, b, 10.0) - 0.25).abs() < 1e-9);
        let c = Ticks {
            machine: 3_000,
            ours: 3_500,
        };
        assert_eq!(others_cores(a, c, 10.0), 0.0, "never negative");
        assert_eq!(others_cores(a, b, 0.0), 0.0);
    }
}
