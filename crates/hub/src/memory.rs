//! How much memory this machine gives a model: RAM (within a cgroup limit,
//! when the app runs in a container) and, on macOS, the GPU working set.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineMemory {
    /// Physical memory, or the cgroup limit when lower.
    pub total_bytes: u64,
    /// What is free for a new model now (add what unloading the current
    /// model would free, when the app is about to switch).
    pub available_bytes: u64,
    /// macOS: the most the GPU may keep resident (Metal's recommended
    /// working set); a model beyond it pages or fails. `None` elsewhere.
    pub gpu_limit_bytes: Option<u64>,
}

impl MachineMemory {
    /// This machine now.
    pub fn detect() -> MachineMemory {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        let mut total = system.total_memory();
        let mut available = system.available_memory();
        if let Some(limits) = system.cgroup_limits() {
            total = total.min(limits.total_memory);
            available = available.min(limits.free_memory);
        }
        MachineMemory { total_bytes: total, available_bytes: available, gpu_limit_bytes: gpu_working_set(total) }
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
        let m = MachineMemory { total_bytes: 16 << 30, available_bytes: 8 << 30, gpu_limit_bytes: None };
        assert_eq!(m.limit_bytes(), 16 << 30);
        assert_eq!(m.with_gpu_limit(11 << 30).limit_bytes(), 11 << 30);
    }
}
