//! Our own launcher for ranks on this machine (tests, benchmarks): what
//! `mlx.launch --backend ring -n N` does locally, without Python. It writes a
//! hostfile of free loopback ports, starts each rank with the environment
//! mlx.launch would give it (`MLX_RANK`, `MLX_HOSTFILE`), collects each
//! rank's output and kills whatever is still running at the deadline, so a
//! stuck ring fails a test instead of hanging it.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::env::{HOSTFILE_VAR, RANK_VAR};
use super::hostfile::Hostfile;
use crate::{Error, Result};

/// A hostfile for `size` local ranks, written to a private temporary folder
/// that goes away with this value.
pub struct LocalRing {
    /// The ranks' addresses.
    pub hostfile: Hostfile,
    dir: PathBuf,
    hostfile_path: PathBuf,
}

impl LocalRing {
    /// Picks `size` free loopback ports and writes the hostfile.
    pub fn new(size: usize) -> Result<LocalRing> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let hostfile = Hostfile::local(size)?;
        let dir = std::env::temp_dir().join(format!(
            "vlm-ring-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let hostfile_path = dir.join("hostfile.json");
        hostfile.write(&hostfile_path)?;
        Ok(LocalRing { hostfile, dir, hostfile_path })
    }

    /// Where the hostfile is.
    pub fn hostfile_path(&self) -> &Path {
        &self.hostfile_path
    }

    /// Starts `command` as rank `rank`, with its output captured.
    pub fn spawn(&self, rank: usize, mut command: Command) -> Result<RankProcess> {
        if rank >= self.hostfile.size() {
            return Err(Error::Distributed(format!(
                "rank {rank} is not in a ring of {}",
                self.hostfile.size()
            )));
        }
        command
            .env(RANK_VAR, rank.to_string())
            .env(HOSTFILE_VAR, &self.hostfile_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command.spawn().map_err(|e| {
            Error::Distributed(format!("cannot start rank {rank} ({program}): {e}"))
        })?;
        // Drained by threads as the rank runs: a rank blocked on a full pipe
        // would look like a hung ring.
        let stdout = drain(child.stdout.take().expect("piped"));
        let stderr = drain(child.stderr.take().expect("piped"));
        Ok(RankProcess {
            rank,
            child,
            stdout: Some(stdout),
            stderr: Some(stderr),
            started: Instant::now(),
        })
    }

    /// Starts every rank (`command(rank)` builds each one's command) and
    /// waits for them all, killing any still running after `timeout`.
    pub fn run_all(
        &self,
        command: impl Fn(usize) -> Command,
        timeout: Duration,
    ) -> Result<Vec<RankOutput>> {
        let mut ranks = Vec::new();
        for rank in 0..self.hostfile.size() {
            match self.spawn(rank, command(rank)) {
                Ok(p) => ranks.push(p),
                Err(e) => {
                    for p in ranks {
                        p.kill();
                    }
                    return Err(e);
                }
            }
        }
        Ok(wait_all(ranks, timeout))
    }
}

impl Drop for LocalRing {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running rank; dropping it kills it (a failed test leaves no rank behind).
pub struct RankProcess {
    /// Its rank.
    pub rank: usize,
    child: Child,
    /// Taken when it finishes.
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
}

impl RankProcess {
    /// Kills it (our own child, by its handle) and reaps it.
    pub fn kill(self) {
        drop(self)
    }

    fn finish(mut self, exit: RankExit) -> RankOutput {
        let output =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        RankOutput {
            rank: self.rank,
            exit,
            elapsed: self.started.elapsed(),
            stdout: output(self.stdout.take()),
            stderr: output(self.stderr.take()),
        }
    }
}

impl Drop for RankProcess {
    fn drop(&mut self) {
        // Reaped already when it exited by itself: then both are no-ops.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankExit {
    /// It exited by itself.
    Exited(ExitStatus),
    /// It was still running at the deadline and was killed.
    TimedOut,
}

/// What a rank did.
#[derive(Debug)]
pub struct RankOutput {
    /// Its rank.
    pub rank: usize,
    /// How it ended.
    pub exit: RankExit,
    /// From start to exit (or to the kill).
    pub elapsed: Duration,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl RankOutput {
    /// Exited by itself with status 0.
    pub fn succeeded(&self) -> bool {
        matches!(self.exit, RankExit::Exited(s) if s.success())
    }

    /// Its exit code, if it exited by itself with one.
    pub fn code(&self) -> Option<i32> {
        match self.exit {
            RankExit::Exited(s) => s.code(),
            RankExit::TimedOut => None,
        }
    }
}

impl std::fmt::Display for RankOutput {
    /// Everything about the rank, for a failing test's message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} {:?} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.rank, self.exit, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Waits for every rank; those still running after `timeout` are killed.
pub fn wait_all(mut ranks: Vec<RankProcess>, timeout: Duration) -> Vec<RankOutput> {
    let deadline = Instant::now() + timeout;
    let mut done: Vec<RankOutput> = Vec::new();
    while !ranks.is_empty() {
        let mut i = 0;
        while i < ranks.len() {
            match ranks[i].child.try_wait() {
                Ok(Some(status)) => {
                    done.push(ranks.swap_remove(i).finish(RankExit::Exited(status)))
                }
                // A rank we cannot ask about is treated as still running: the
                // deadline ends it.
                Ok(None) | Err(_) => i += 1,
            }
        }
        if ranks.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for mut p in ranks.drain(..) {
                let _ = p.child.kill();
                let _ = p.child.wait();
                done.push(p.finish(RankExit::TimedOut));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done.sort_by_key(|o| o.rank);
    done
}

fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}
