//! Facts about the host that guest command lines need.

use std::fmt;

/// Why the host TSC frequency could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TscUnknown(pub String);

impl fmt::Display for TscUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot tell the host TSC frequency: {}", self.0)
    }
}

impl std::error::Error for TscUnknown {}

/// The host TSC frequency in kHz, for the guest's `tsc_early_khz=` (without it, QEMU TCG
/// microvm guests hang in TSC calibration about one boot in three).
///
/// Read from the first `cpu MHz` line of `/proc/cpuinfo`; on these machines the TSC runs at a
/// constant, known rate (`constant_tsc`, `tsc_known_freq`) equal to it.
pub fn tsc_khz() -> Result<u64, TscUnknown> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
        .map_err(|e| TscUnknown(format!("reading /proc/cpuinfo: {e}")))?;
    tsc_khz_from_cpuinfo(&cpuinfo)
}

/// [`tsc_khz`] on the text of a `/proc/cpuinfo`.
pub fn tsc_khz_from_cpuinfo(cpuinfo: &str) -> Result<u64, TscUnknown> {
    let line = cpuinfo
        .lines()
        .find(|line| line.starts_with("cpu MHz"))
        .ok_or_else(|| TscUnknown("no `cpu MHz` line in /proc/cpuinfo".to_string()))?;
    let value = line
        .split(':')
        .nth(1)
        .map(str::trim)
        .ok_or_else(|| TscUnknown(format!("malformed line {line:?}")))?;
    let mhz: f64 = value
        .parse()
        .map_err(|e| TscUnknown(format!("malformed line {line:?}: {e}")))?;
    if !(mhz.is_finite() && mhz > 0.0) {
        return Err(TscUnknown(format!("implausible frequency in {line:?}")));
    }
    Ok((mhz * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_cpu_mhz_line() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Xeon\ncpu MHz\t\t: 2599.998\n\nprocessor\t: 1\ncpu MHz\t\t: 1200.000\n";
        assert_eq!(tsc_khz_from_cpuinfo(cpuinfo), Ok(2_599_998));
    }

    #[test]
    fn missing_or_bad_lines_are_errors() {
        assert!(tsc_khz_from_cpuinfo("processor\t: 0\n").is_err());
        assert!(tsc_khz_from_cpuinfo("cpu MHz\t\t: fast\n").is_err());
        assert!(tsc_khz_from_cpuinfo("cpu MHz\t\t: 0\n").is_err());
    }
}
