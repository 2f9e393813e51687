//! How much memory this machine gives a model: RAM (within a cgroup limit,
//! when the app runs in a container) and, on macOS, the GPU working set.
//!
//! "Free" is what the operating system itself calls available: memory that
//! is unused *or can be reclaimed at once* (file cache that is not being
//! used, purgeable pages). Counting only the unused part made a 24 GB Linux
//! machine with a warm file cache look like it had 7.7 GB "free" while the
//! kernel reported 23.6 GB available (issue 29): sysinfo's cgroup reading
//! subtracts the cgroup's whole usage, page cache included, even when the
//! cgroup has no limit. So the figures are read here: `/proc/meminfo`'s
//! `MemAvailable` and each limited cgroup's usage less its inactive file
//! cache on Linux, the VM statistics on macOS; sysinfo elsewhere.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineMemory {
    /// Physical memory, or the cgroup limit when lower.
    pub total_bytes: u64,
    /// What is free for a new model now, reclaimable memory included (add
    /// what unloading the current model would free, when the app is about
    /// to switch).
    pub available_bytes: u64,
    /// macOS: the most the GPU may keep resident (Metal's recommended
    /// working set); a model beyond it pages or fails. `None` elsewhere.
    pub gpu_limit_bytes: Option<u64>,
}

impl MachineMemory {
    /// This machine now.
    pub fn detect() -> MachineMemory {
        let (total, available) = os_memory().unwrap_or_else(sysinfo_memory);
        MachineMemory {
            total_bytes: total,
            available_bytes: available.min(total),
            gpu_limit_bytes: gpu_working_set(total),
        }
    }

    /// The GPU limit as MLX reports it (`max_recommended_working_set_size`),
    /// which the app knows better than the estimate [`MachineMemory::detect`] makes.
    pub fn with_gpu_limit(self, bytes: u64) -> MachineMemory {
        MachineMemory { gpu_limit_bytes: Some(bytes), ..self }
    }

    /// The most a model may use on this machine.
    pub fn limit_bytes(&self) -> u64 {
        self.gpu_limit_bytes.map_or(self.total_bytes, |gpu| gpu.min(self.total_bytes))
    }
}

/// (total, available) as sysinfo counts them: the fallback where the
/// system's own figures cannot be read.
fn sysinfo_memory() -> (u64, u64) {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    (system.total_memory(), system.available_memory())
}

#[cfg(target_os = "linux")]
fn os_memory() -> Option<(u64, u64)> {
    linux_memory(&|path: &Path| std::fs::read_to_string(path).ok())
}

#[cfg(target_os = "macos")]
fn os_memory() -> Option<(u64, u64)> {
    let (total, _) = sysinfo_memory();
    Some((total, mac_available(mac_vm_pages()?)))
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn os_memory() -> Option<(u64, u64)> {
    None
}

/// Reads a file of the (real or, in tests, a made-up) file system.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
type ReadFile<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// Linux: `MemTotal` and `MemAvailable` (the kernel's own estimate of what
/// can be given to a new program without swapping: free memory plus the
/// reclaimable page cache and slab), within every cgroup limit on the way
/// from this process's cgroup to the root.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn linux_memory(read: ReadFile) -> Option<(u64, u64)> {
    let meminfo = read(Path::new("/proc/meminfo"))?;
    let field = |name: &str| {
        meminfo.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok().map(|kib| kib * 1024)
        })
    };
    let total = field("MemTotal")?;
    // kernels before 3.14 have no MemAvailable: free + (inactive) file cache
    let available = field("MemAvailable")
        .or_else(|| Some(field("MemFree")? + field("Inactive(file)").unwrap_or(0)))?
        .min(total);
    let own = read(Path::new("/proc/self/cgroup")).unwrap_or_default();
    Some(
        cgroup_levels(read, &own)
            .iter()
            .filter(|l| l.limit < total)
            .fold((total, available), |(t, a), l| (t.min(l.limit), a.min(l.free()))),
    )
}

/// One cgroup from this process's up to the root, with a memory limit.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CgroupLevel {
    limit: u64,
    /// What the kernel charges the cgroup: its programs and its page cache.
    usage: u64,
    /// File cache nobody used lately: the first thing reclaimed at the limit.
    inactive_file: u64,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl CgroupLevel {
    /// Free within the limit, the reclaimable cache counted as free (as
    /// `docker stats` and the kubelet's working set count it).
    fn free(&self) -> u64 {
        self.limit.saturating_sub(self.usage.saturating_sub(self.inactive_file))
    }
}

/// The limited cgroups above this process (cgroup v2, else v1), from the
/// `/proc/self/cgroup` text `own`. A container sees its own cgroup as the
/// mount's root, where the listed path does not exist: then the root.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn cgroup_levels(read: ReadFile, own: &str) -> Vec<CgroupLevel> {
    let v2 = own.lines().find_map(|l| l.strip_prefix("0::"));
    let v1 = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then_some(path)
    });
    let stat = |dir: &Path, key: &str| {
        read(&dir.join("memory.stat"))?
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let number = |path: PathBuf| read(&path).and_then(|t| t.trim().parse::<u64>().ok());
    // "max" (v2) and v1's page-rounded i64::MAX are no limit
    let walk = |root: &Path,
                own: Option<&str>,
                limit: &str,
                usage: &str,
                inactive: &str|
     -> Vec<CgroupLevel> {
        let joined = own
            .map(|p| root.join(p.trim_start_matches('/')))
            .filter(|d| read(&d.join(usage)).is_some());
        let start = joined.unwrap_or_else(|| root.to_path_buf());
        start
            .ancestors()
            .take_while(|d| d.starts_with(root))
            .filter_map(|dir| {
                Some(CgroupLevel {
                    limit: number(dir.join(limit))?,
                    usage: number(dir.join(usage))?,
                    inactive_file: stat(dir, inactive).unwrap_or(0),
                })
            })
            .collect()
    };
    let v2_root = Path::new("/sys/fs/cgroup");
    if v2.is_some() && read(&v2_root.join("cgroup.controllers")).is_some() {
        return walk(v2_root, v2, "memory.max", "memory.current", "inactive_file");
    }
    walk(
        Path::new("/sys/fs/cgroup/memory"),
        v1,
        "memory.limit_in_bytes",
        "memory.usage_in_bytes",
        "total_inactive_file",
    )
}

/// Page counts from macOS's VM statistics (`host_statistics64`, what
/// `vm_stat` prints).
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VmPages {
    page_size: u64,
    /// Unused (speculative pages included: read ahead, not yet used).
    free: u64,
    /// Not touched lately: the system reclaims them first.
    inactive: u64,
    /// Volatile memory programs said may be thrown away.
    purgeable: u64,
}

/// Free, inactive and purgeable pages: what macOS can hand a new program
/// without compressing or swapping anyone's memory.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn mac_available(p: VmPages) -> u64 {
    (p.free + p.inactive + p.purgeable).saturating_mul(p.page_size)
}

#[cfg(target_os = "macos")]
fn mac_vm_pages() -> Option<VmPages> {
    // SAFETY: host_statistics64 fills at most `count` integers of the
    // zeroed vm_statistics64 it is given; the host port is our own task's.
    unsafe {
        let mut count = libc::HOST_VM_INFO64_COUNT;
        let mut stat = std::mem::zeroed::<libc::vm_statistics64>();
        #[allow(deprecated)]
        let host = libc::mach_host_self();
        let ok = libc::host_statistics64(
            host,
            libc::HOST_VM_INFO64,
            &mut stat as *mut libc::vm_statistics64 as libc::host_info64_t,
            &mut count,
        );
        let page_size = libc::sysconf(libc::_SC_PAGESIZE);
        (ok == libc::KERN_SUCCESS && page_size > 0).then(|| VmPages {
            page_size: page_size as u64,
            free: u64::from(stat.free_count),
            inactive: u64::from(stat.inactive_count),
            purgeable: u64::from(stat.purgeable_count),
        })
    }
}

/// Metal's recommended working set on Apple silicon: about three quarters of
/// the memory on larger machines, two thirds on smaller ones (what
/// `MTLDevice.recommendedMaxWorkingSetSize` reports unless
/// `iogpu.wired_limit_mb` was raised). An estimate for before MLX is loaded.
#[cfg(target_os = "macos")]
fn gpu_working_set(total: u64) -> Option<u64> {
    const GIB: u64 = 1 << 30;
    Some(if total > 36 * GIB { total / 4 * 3 } else { total / 3 * 2 })
}

#[cfg(not(target_os = "macos"))]
fn gpu_working_set(_total: u64) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const GIB: u64 = 1 << 30;

    #[test]
    fn this_machine_has_memory_and_some_is_free() {
        let m = MachineMemory::detect();
        assert!(m.total_bytes > 256 << 20, "{m:?}");
        assert!(m.available_bytes > 0 && m.available_bytes <= m.total_bytes, "{m:?}");
        assert!(m.limit_bytes() <= m.total_bytes);
        #[cfg(not(target_os = "macos"))]
        assert_eq!(m.gpu_limit_bytes, None);
    }

    #[test]
    fn the_gpu_limit_bounds_what_a_model_may_use() {
        let m = MachineMemory {
            total_bytes: 16 << 30,
            available_bytes: 8 << 30,
            gpu_limit_bytes: None,
        };
        assert_eq!(m.limit_bytes(), 16 << 30);
        assert_eq!(m.with_gpu_limit(11 << 30).limit_bytes(), 11 << 30);
    }

    /// A file system of the given files only.
    fn files(list: &[(&str, String)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> =
            list.iter().map(|(p, t)| (PathBuf::from(p), t.clone())).collect();
        move |p: &Path| map.get(p).cloned()
    }

    fn meminfo(total_kib: u64, free_kib: u64, available_kib: u64) -> String {
        format!(
            "MemTotal:       {total_kib} kB\nMemFree:        {free_kib} kB\nMemAvailable:   {available_kib} kB\nInactive(file): 1000 kB\n"
        )
    }

    #[test]
    fn a_warm_file_cache_counts_as_available_as_the_kernel_counts_it() {
        // The machine of issue 29: 24.7 GB of RAM, 23.6 GB available, the
        // rest mostly file cache; cgroup v1 with no limit (i64::MAX rounded
        // to a page) charging 16.9 GB, page cache included. sysinfo said
        // 24.7 - 16.9 = 7.7 GB free.
        let read = files(&[
            ("/proc/meminfo", meminfo(24_684_096, 7_900_000, 23_046_875)),
            ("/proc/self/cgroup", "4:memory:/process_api/abc\n1:cpu:/\n0::/\n".into()),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n".into()),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "16900000000\n".into()),
            (
                "/sys/fs/cgroup/memory/memory.stat",
                "cache 22061056\ntotal_inactive_file 12000000000\n".into(),
            ),
        ]);
        let (total, available) = linux_memory(&read).unwrap();
        assert_eq!(total, 24_684_096 * 1024);
        assert_eq!(
            available,
            23_046_875 * 1024,
            "MemAvailable, 23.6 GB: no limit, so the cgroup changes nothing"
        );
        assert_eq!(format!("{:.1}", available as f64 / 1e9), "23.6");
    }

    #[test]
    fn a_container_limit_counts_its_reclaimable_cache_as_free() {
        // cgroup v2, 8 GiB limit, 7 GiB charged of which 3 GiB is inactive
        // file cache: 4 GiB in use, 4 GiB free (not 1 GiB)
        let read = files(&[
            ("/proc/meminfo", meminfo(64 * 1024 * 1024, 30 * 1024 * 1024, 50 * 1024 * 1024)),
            ("/proc/self/cgroup", "0::/app.slice/vlm.scope\n".into()),
            ("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n".into()),
            ("/sys/fs/cgroup/app.slice/vlm.scope/memory.max", format!("{}\n", 8 * GIB)),
            ("/sys/fs/cgroup/app.slice/vlm.scope/memory.current", format!("{}\n", 7 * GIB)),
            (
                "/sys/fs/cgroup/app.slice/vlm.scope/memory.stat",
                format!("anon 100\nfile 200\ninactive_file {}\n", 3 * GIB),
            ),
            ("/sys/fs/cgroup/app.slice/memory.max", "max\n".into()),
            ("/sys/fs/cgroup/app.slice/memory.current", format!("{}\n", 9 * GIB)),
        ]);
        assert_eq!(linux_memory(&read).unwrap(), (8 * GIB, 4 * GIB));
        // a tighter parent wins: 6 GiB for the slice, 5.5 charged, 0.5 reclaimable
        let read = files(&[
            ("/proc/meminfo", meminfo(64 * 1024 * 1024, 30 * 1024 * 1024, 50 * 1024 * 1024)),
            ("/proc/self/cgroup", "0::/app.slice/vlm.scope\n".into()),
            ("/sys/fs/cgroup/cgroup.controllers", "cpu memory\n".into()),
            ("/sys/fs/cgroup/app.slice/vlm.scope/memory.max", format!("{}\n", 8 * GIB)),
            ("/sys/fs/cgroup/app.slice/vlm.scope/memory.current", format!("{}\n", GIB)),
            ("/sys/fs/cgroup/app.slice/memory.max", format!("{}\n", 6 * GIB)),
            ("/sys/fs/cgroup/app.slice/memory.current", format!("{}\n", 5 * GIB + GIB / 2)),
            ("/sys/fs/cgroup/app.slice/memory.stat", format!("inactive_file {}\n", GIB / 2)),
        ]);
        assert_eq!(linux_memory(&read).unwrap(), (6 * GIB, GIB));
        // inside a container the listed path is not there: its root is the cgroup
        let read = files(&[
            ("/proc/meminfo", meminfo(64 * 1024 * 1024, 30 * 1024 * 1024, 50 * 1024 * 1024)),
            ("/proc/self/cgroup", "0::/docker/123\n".into()),
            ("/sys/fs/cgroup/cgroup.controllers", "memory\n".into()),
            ("/sys/fs/cgroup/memory.max", format!("{}\n", 4 * GIB)),
            ("/sys/fs/cgroup/memory.current", format!("{}\n", 2 * GIB)),
        ]);
        assert_eq!(linux_memory(&read).unwrap(), (4 * GIB, 2 * GIB));
    }

    #[test]
    fn no_meminfo_no_reading_and_an_old_kernel_adds_its_file_cache() {
        assert_eq!(linux_memory(&files(&[])), None);
        let old = files(&[(
            "/proc/meminfo",
            "MemTotal: 1000 kB\nMemFree: 300 kB\nInactive(file): 200 kB\n".into(),
        )]);
        assert_eq!(linux_memory(&old), Some((1000 * 1024, 500 * 1024)));
    }

    #[test]
    fn on_a_mac_free_inactive_and_purgeable_pages_are_available() {
        // 16 KiB pages: 100k free, 300k inactive, 20k purgeable = 6.9 GB
        let pages =
            VmPages { page_size: 16384, free: 100_000, inactive: 300_000, purgeable: 20_000 };
        assert_eq!(mac_available(pages), 420_000 * 16384);
    }
}
