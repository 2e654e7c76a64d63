//! How many performance cores the machine has (for the default thread count).

use alloc::vec::Vec;

/// The number of logical CPUs of the performance class, capped by
/// `std::thread::available_parallelism` (which honours affinity masks and cgroup quotas);
/// `available_parallelism` itself when the platform does not say, 1 if even that fails.
pub(super) fn performance_cores() -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    platform_performance_cores().map_or(available, |p| p.clamp(1, available))
}

#[cfg(target_os = "linux")]
fn platform_performance_cores() -> Option<usize> {
    let cpus = online_cpus()?;
    // Arm big.LITTLE (and Linux's x86 hybrid support) publish a relative capacity, 1024 for
    // the biggest core. Little cores sit well under half of it, mid cores above.
    let read = |cpu: usize, file: &str| -> Option<u64> {
        let path = std::format!("/sys/devices/system/cpu/cpu{cpu}/{file}");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    let capacities: Option<Vec<u64>> = cpus.iter().map(|&c| read(c, "cpu_capacity")).collect();
    if let Some(caps) = capacities {
        return count_near_max(&caps, 2, 5);
    }
    // Otherwise the maximum frequency: efficiency cores run at about 3/4 of the performance
    // cores' top clock or less, while "favoured" performance cores differ by a few percent.
    let freqs: Option<Vec<u64>> =
        cpus.iter().map(|&c| read(c, "cpufreq/cpuinfo_max_freq")).collect();
    count_near_max(&freqs?, 17, 20)
}

/// The online CPUs' numbers, from `/sys/devices/system/cpu/online` ("0-3,8-11").
#[cfg(target_os = "linux")]
fn online_cpus() -> Option<Vec<usize>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    parse_cpu_list(text.trim())
}

/// Parses a Linux CPU list such as `0-3,8,10-11`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi): (usize, usize) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse().ok()?, hi.parse().ok()?),
            None => {
                let c = part.parse().ok()?;
                (c, c)
            }
        };
        if hi < lo || hi - lo > 1 << 16 {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// How many values are at least `num / den` of the largest (`None` if empty or all zero).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn count_near_max(values: &[u64], num: u64, den: u64) -> Option<usize> {
    let max = *values.iter().max()?;
    if max == 0 {
        return None;
    }
    Some(values.iter().filter(|&&v| v.saturating_mul(den) >= max.saturating_mul(num)).count())
}

#[cfg(target_vendor = "apple")]
fn platform_performance_cores() -> Option<usize> {
    // Unverified here (no Apple machine in CI): Apple silicon reports its performance cluster
    // as perflevel0.
    let mut value: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>();
    // SAFETY: the name is NUL-terminated, `value`/`len` are valid for writes of `len` bytes,
    // and no new value is set (null, 0).
    let rc = unsafe {
        libc::sysctlbyname(
            c"hw.perflevel0.logicalcpu".as_ptr(),
            (&raw mut value).cast(),
            &mut len,
            core::ptr::null_mut(),
            0,
        )
    };
    (rc == 0 && value > 0).then_some(value as usize)
}

#[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
fn platform_performance_cores() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(alloc::vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list("0"), Some(alloc::vec![0]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn near_max_counts() {
        // A phone: 1 big, 3 mid, 4 little capacities.
        assert_eq!(count_near_max(&[1024, 870, 870, 870, 400, 400, 400, 400], 2, 5), Some(4));
        assert_eq!(count_near_max(&[1024, 1024], 2, 5), Some(2));
        // A hybrid desktop's max frequencies (kHz): P-cores 5.4 / 5.5 GHz, E-cores 4.2 GHz.
        let f = [5_500_000, 5_400_000, 5_400_000, 5_500_000, 4_200_000, 4_200_000];
        assert_eq!(count_near_max(&f, 17, 20), Some(4));
        assert_eq!(count_near_max(&[], 1, 2), None);
        assert_eq!(count_near_max(&[0, 0], 1, 2), None);
    }

    #[test]
    fn performance_cores_is_sane() {
        let n = performance_cores();
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((1..=available).contains(&n), "{n} of {available}");
    }
}
