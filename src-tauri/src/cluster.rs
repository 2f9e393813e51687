//! Settings' "Split models across machines": the loaded model split over
//! MLX's ring backend, this Mac as rank 0 (it runs the scheduler and
//! everything above it), the other machines each running
//! `vlm serve --model <the same folder> --distributed <hostfile> --rank N --split <how>
//! --ring-secret-file cluster-ring.secret`.
//! How to split (every rank must say the same): pipeline (each rank a range
//! of layers), tensor parallel (every layer's heads and MLP columns divided),
//! or auto (tensor where the model allows it, pipeline otherwise).
//!
//! Only ranks that hold the ring secret join (cluster_secret.rs: made once,
//! in the data folder): the user copies it to each other machine beside the
//! hostfile, and the command shown for that machine names both files.
//!
//! What this Mac knows is only what rank 0 knows: whether the ring joined
//! within the join timeout, whether a step failed since (the engine reports
//! DISTRIBUTED_ERROR, and cannot tell which rank was lost), and while joined
//! each rank's memory (the engine gathers it when its stats are asked).
//!
//! MLX keeps one group per process and cannot leave it: once this process
//! has joined (or tried to join) a ring, loading a split model again (another
//! model, other settings, after a lost rank or a failed join) needs the app
//! restarted, and the other ranks too. The app says so instead of trying.
use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use engine::distributed::env::{HOSTFILE_VAR, RANK_VAR};
use engine::distributed::{GroupConfig, Hostfile, RankMemory, RingSecret, Split};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::cluster_secret::{self, RING_SECRET_NAME};
use crate::error::{AppError, AppResult};
use crate::paths::Paths;
use crate::state::AppState;

/// The longest join timeout: an hour, in seconds.
const MAX_JOIN_TIMEOUT_SECS: u64 = 3600;

/// Where the hostfile written from a list of hosts goes, in the data folder.
pub const HOSTFILE_NAME: &str = "cluster-hostfile.json";

/// The code of a second split load in one run of the app.
pub const RESTART_NEEDED: &str = "CLUSTER_RESTART_NEEDED";

/// How a model is split across the ranks (the engine's [`Split`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum ClusterSplit {
    /// Tensor parallel where the model's family has it and its heads divide
    /// by the number of ranks; pipeline otherwise.
    #[default]
    Auto,
    /// Every layer split across the ranks: two exchanges per layer, for a
    /// fast link (Thunderbolt).
    Tensor,
    /// Each rank runs a range of layers: one exchange per token per rank,
    /// every model; fine over Ethernet or Wi-Fi.
    Pipeline,
}

impl From<ClusterSplit> for Split {
    fn from(s: ClusterSplit) -> Split {
        match s {
            ClusterSplit::Auto => Split::Auto,
            ClusterSplit::Tensor => Split::Tensor,
            ClusterSplit::Pipeline => Split::Pipeline,
        }
    }
}

/// What the other machine of rank `rank` runs to join, in the folder where
/// the hostfile (named `hostfile_name`) and the ring secret were copied (the
/// model folder is the same model at its path there). The secret is named
/// by its file, so it shows in no shell history and no process list.
pub fn follower_command(rank: usize, split: ClusterSplit, hostfile_name: &str) -> String {
    format!(
        "vlm serve --model <the same model folder> --distributed {} --rank {rank} --split {} --ring-secret-file {}",
        shell_word(hostfile_name),
        Split::from(split).name(),
        shell_word(RING_SECRET_NAME)
    )
}

/// The files each other machine needs beside the model, as this Mac has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerFiles {
    /// The hostfile MLX reads: the one named in Settings, or the one the
    /// app writes from the list of hosts.
    pub hostfile: PathBuf,
    /// The ring secret (cluster_secret.rs).
    pub secret: PathBuf,
}

impl FollowerFiles {
    /// The files `settings` describe (whether or not they exist yet).
    pub fn of(settings: &ClusterSettings, paths: &Paths) -> FollowerFiles {
        let named = settings.hostfile.trim();
        FollowerFiles {
            hostfile: match named.is_empty() {
                true => paths.data_dir.join(HOSTFILE_NAME),
                false => PathBuf::from(named),
            },
            secret: cluster_secret::path(paths),
        }
    }

    fn hostfile_name(&self) -> Cow<'_, str> {
        self.hostfile.file_name().unwrap_or(self.hostfile.as_os_str()).to_string_lossy()
    }

    /// A command that copies both files to the home folder of the machine
    /// at `address` (scp keeps the secret's mode: readable by its owner
    /// only), where a new terminal runs [`follower_command`].
    pub fn copy_command(&self, address: &SocketAddr) -> String {
        let host = match address.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        format!(
            "scp {} {} {host}:",
            shell_word(&self.hostfile.to_string_lossy()),
            shell_word(&self.secret.to_string_lossy())
        )
    }
}

/// `word` as one word for a POSIX shell (zsh, bash): quoted unless it is
/// plain (a Mac's data folder is under "Application Support").
fn shell_word(word: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(default)]
pub struct ClusterSettings {
    /// Split the models loaded from now on across the machines below.
    pub enabled: bool,
    /// An MLX ring hostfile (what `mlx.launch` writes: a JSON list, one list
    /// of "ip:port" per rank, rank 0 = this Mac). Empty: `hosts` is used.
    pub hostfile: String,
    /// One "ip:port" per rank, rank 0 = this Mac; the app writes them as a
    /// hostfile into its data folder (used when `hostfile` is empty).
    pub hosts: Vec<String>,
    /// Seconds to wait for the other ranks to join (they may still be loading).
    #[ts(type = "number")]
    pub join_timeout_secs: u64,
    /// How to split: every rank must run with the same `--split`.
    pub split: ClusterSplit,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            enabled: false,
            hostfile: String::new(),
            hosts: Vec::new(),
            join_timeout_secs: GroupConfig::default().connect_timeout.as_secs(),
            split: ClusterSplit::Auto,
        }
    }
}

impl ClusterSettings {
    /// The hosts with blank lines left out.
    fn host_list(&self) -> Vec<&str> {
        self.hosts.iter().map(|h| h.trim()).filter(|h| !h.is_empty()).collect()
    }

    /// Rejects what could never form a ring, with a message for the form.
    /// Checked only when on: a half-typed list may wait while off.
    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.join_timeout_secs == 0 || self.join_timeout_secs > MAX_JOIN_TIMEOUT_SECS {
            return Err(format!(
                "the join timeout must be between 1 and {MAX_JOIN_TIMEOUT_SECS} seconds"
            ));
        }
        self.hostfile_contents().map(|_| ()).map_err(|e| e.message)
    }

    /// The ring this setting describes, and the file MLX reads it from
    /// (`None`: it is to be written from the list of hosts).
    pub fn hostfile_contents(&self) -> AppResult<(Hostfile, Option<PathBuf>)> {
        let bad = |m: String| AppError::new("INVALID_SETTINGS", m);
        let path = self.hostfile.trim();
        let hostfile = if !path.is_empty() {
            let path = PathBuf::from(path);
            if !path.is_absolute() || !path.is_file() {
                return Err(bad(format!(
                    "the hostfile {} is not a file (give its full path)",
                    path.display()
                )));
            }
            let hostfile = Hostfile::read(&path).map_err(|e| bad(e.to_string()))?;
            (hostfile, Some(path))
        } else {
            let ranks = self
                .host_list()
                .iter()
                .enumerate()
                .map(|(rank, h)| {
                    h.parse::<SocketAddr>().map(|a| vec![a]).map_err(|_| {
                        bad(format!("rank {rank}: {h:?} is not ip:port (MLX's ring needs IP addresses, e.g. 192.168.1.20:5000)"))
                    })
                })
                .collect::<AppResult<Vec<_>>>()?;
            (Hostfile { ranks }, None)
        };
        if hostfile.0.size() < 2 {
            return Err(bad(
                "a split model needs at least 2 ranks: this Mac (rank 0) and one more".into(),
            ));
        }
        Ok(hostfile)
    }

    /// The hostfile MLX is to read: the one named, or the hosts written to
    /// the data folder.
    pub fn hostfile_path(&self, paths: &Paths) -> AppResult<(PathBuf, Hostfile)> {
        let (hostfile, path) = self.hostfile_contents()?;
        let path = match path {
            Some(p) => p,
            None => {
                std::fs::create_dir_all(&paths.data_dir).map_err(|e| {
                    AppError::new("IO_ERROR", format!("{}: {e}", paths.data_dir.display()))
                })?;
                let p = paths.data_dir.join(HOSTFILE_NAME);
                // rewritten only when the ring changed (Settings asks often)
                if Hostfile::read(&p).ok().as_ref() != Some(&hostfile) {
                    hostfile.write(&p)?;
                }
                p
            }
        };
        Ok((path, hostfile))
    }

    /// How rank 0 joins: only ranks that prove `ring_secret` get through.
    pub fn group_config(&self, ring_secret: RingSecret) -> GroupConfig {
        GroupConfig {
            ring_secret: Some(ring_secret),
            connect_timeout: Duration::from_secs(self.join_timeout_secs),
            split: self.split.into(),
            // A pipeline gives each Mac layers in proportion to its memory.
            stage_memory: Some(hub::MachineMemory::detect().limit_bytes()),
            ..GroupConfig::default()
        }
    }
}

/// Where the ring stands, as rank 0 sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum ClusterState {
    /// Nothing joined yet in this run of the app.
    #[default]
    NotJoined,
    /// A split model is loading: waiting for the other ranks to join.
    Waiting,
    /// The ring joined and the split model answers.
    Joined,
    /// The ring did not join within the timeout (or the model cannot split).
    Failed,
    /// A rank was lost after joining: the engine reports DISTRIBUTED_ERROR.
    Lost,
    /// The split model was unloaded or replaced; its ranks have stopped.
    Left,
}

/// The ring this run of the app joined or tried to join (MLX keeps one).
#[derive(Debug, Clone)]
pub struct ClusterRun {
    pub hostfile_path: PathBuf,
    pub hostfile: Hostfile,
    pub state: ClusterState,
    pub error: Option<AppError>,
    /// The model (gallery id) split over it.
    pub model_id: String,
    /// How it was split (as asked: `Auto` stays `Auto`).
    pub split: ClusterSplit,
    /// This Mac's share of the model, in the engine's words, once loaded.
    pub share: Option<String>,
    /// Each rank's memory as last gathered by the engine (empty before).
    pub memory: Vec<RankMemory>,
}

/// One rank's line in the UI.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct RankLine {
    pub rank: usize,
    /// The addresses it listens on, from the hostfile.
    pub addresses: Vec<String>,
    /// Rank 0: this Mac.
    pub this_mac: bool,
    /// What rank 0 knows: the ring's state (which rank was lost is not known).
    pub state: ClusterState,
    /// Its share of the model's weights loaded, in bytes, once known.
    #[ts(type = "number | null")]
    pub weights_bytes: Option<u64>,
    /// What its caches (KV, prefix) hold now, in bytes, once known.
    #[ts(type = "number | null")]
    pub kv_bytes: Option<u64>,
    /// Rank 0: its part of the model in words ("layers 4..8 of 8, pipeline
    /// rank 0 of 2"), once loaded.
    pub share: Option<String>,
    /// Another machine's rank: the command it runs to join, where the
    /// hostfile and the ring secret were copied.
    pub command: Option<String>,
    /// Another machine's rank: a command that copies the hostfile and the
    /// ring secret there (scp to its address; any other way will do).
    pub copy_command: Option<String>,
}

/// The Cluster setting's status, for Settings.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct ClusterStatus {
    pub enabled: bool,
    pub state: ClusterState,
    /// One per rank of the ring joined (or of the settings, before any).
    pub ranks: Vec<RankLine>,
    /// The hostfile MLX read (or will read).
    pub hostfile_path: Option<String>,
    /// The ring secret the other machines need beside the hostfile (made
    /// when the setting is on).
    pub secret_path: Option<String>,
    /// Why the ring failed or was lost, or why the settings cannot form one.
    pub error: Option<AppError>,
    /// The model split over the ring.
    pub model_id: Option<String>,
    /// How the ring joined splits (or, before any, how the settings would).
    pub split: ClusterSplit,
    /// The settings describe another ring than the one this run joined, or
    /// the ring cannot be joined again: restart the app (and the other ranks).
    pub restart_needed: bool,
}

fn lines(
    hostfile: &Hostfile,
    state: ClusterState,
    split: ClusterSplit,
    files: &FollowerFiles,
) -> Vec<RankLine> {
    hostfile
        .ranks
        .iter()
        .enumerate()
        .map(|(rank, addrs)| RankLine {
            rank,
            addresses: addrs.iter().map(|a| a.to_string()).collect(),
            this_mac: rank == 0,
            state,
            weights_bytes: None,
            kv_bytes: None,
            share: None,
            command: (rank > 0).then(|| follower_command(rank, split, &files.hostfile_name())),
            copy_command: addrs.first().filter(|_| rank > 0).map(|a| files.copy_command(a)),
        })
        .collect()
}

/// The status from the settings and what this run did; pure, for tests
/// (`paths` only names the files).
pub fn status_of(
    settings: &ClusterSettings,
    run: Option<&ClusterRun>,
    paths: &Paths,
) -> ClusterStatus {
    let files = FollowerFiles::of(settings, paths);
    let secret_path =
        (settings.enabled || run.is_some()).then(|| files.secret.display().to_string());
    match run {
        Some(run) => {
            let wanted = settings.hostfile_contents().ok().map(|(h, _)| h);
            let other_ring = settings.enabled && wanted.as_ref() != Some(&run.hostfile);
            let spent =
                matches!(run.state, ClusterState::Failed | ClusterState::Lost | ClusterState::Left);
            let ran = FollowerFiles { hostfile: run.hostfile_path.clone(), ..files };
            let mut ranks = lines(&run.hostfile, run.state, run.split, &ran);
            for m in &run.memory {
                if let Some(line) = ranks.get_mut(m.rank) {
                    line.weights_bytes = Some(m.weights_bytes);
                    line.kv_bytes = Some(m.kv_bytes);
                }
            }
            if let Some(line) = ranks.first_mut() {
                line.share = run.share.clone();
            }
            ClusterStatus {
                enabled: settings.enabled,
                state: run.state,
                ranks,
                hostfile_path: Some(run.hostfile_path.display().to_string()),
                secret_path,
                error: run.error.clone(),
                model_id: Some(run.model_id.clone()),
                split: run.split,
                restart_needed: other_ring || (settings.enabled && spent),
            }
        }
        None => {
            let (ranks, error) = if settings.enabled {
                match settings.hostfile_contents() {
                    Ok((h, _)) => {
                        (lines(&h, ClusterState::NotJoined, settings.split, &files), None)
                    }
                    Err(e) => (Vec::new(), Some(e)),
                }
            } else {
                (Vec::new(), None)
            };
            ClusterStatus {
                enabled: settings.enabled,
                state: ClusterState::NotJoined,
                ranks,
                hostfile_path: None,
                secret_path,
                error,
                model_id: None,
                split: settings.split,
                restart_needed: false,
            }
        }
    }
}

/// Before a split load: refuses a second ring in this run, points MLX at
/// the hostfile as rank 0 and records the ring as waiting.
pub fn begin(
    state: &AppState,
    settings: &ClusterSettings,
    model_id: &str,
) -> AppResult<GroupConfig> {
    let mut run = state.cluster.lock().unwrap();
    if let Some(run) = run.as_ref() {
        return Err(AppError::new(
            RESTART_NEEDED,
            format!(
                "This run of the app already joined a ring for a split model ({}; MLX keeps one per process). To load a split model again — another model, other settings, or after a lost rank — quit and reopen the app, and restart `vlm serve --distributed … --split {}` on the other machines.",
                match run.state {
                    ClusterState::Joined => "it is loaded now",
                    ClusterState::Waiting => "it is joining now",
                    ClusterState::Lost => "a rank was lost",
                    ClusterState::Failed => "it did not join",
                    _ => "since unloaded",
                },
                Split::from(settings.split).name()
            ),
        ));
    }
    let (path, hostfile) = settings.hostfile_path(&state.paths)?;
    let secret = cluster_secret::ensure(&state.paths)?;
    // MLX reads these when the group is joined (on the engine thread, after
    // this returns); nothing else in the app reads or writes them.
    std::env::set_var(HOSTFILE_VAR, &path);
    std::env::set_var(RANK_VAR, "0");
    *run = Some(ClusterRun {
        hostfile_path: path,
        hostfile,
        state: ClusterState::Waiting,
        error: None,
        model_id: model_id.to_string(),
        split: settings.split,
        share: None,
        memory: Vec::new(),
    });
    Ok(settings.group_config(secret))
}

/// After a split load: joined, or failed with the engine's error.
pub fn finish(state: &AppState, result: Result<(), &AppError>) {
    if let Some(run) = state.cluster.lock().unwrap().as_mut() {
        match result {
            Ok(()) => {
                run.state = ClusterState::Joined;
                run.error = None;
            }
            Err(e) => {
                run.state = ClusterState::Failed;
                run.error = Some(e.clone());
            }
        }
    }
}

/// The split model was unloaded or replaced: its ranks stop with it.
pub fn left(state: &AppState) {
    if let Some(run) = state.cluster.lock().unwrap().as_mut() {
        if run.state == ClusterState::Joined {
            run.state = ClusterState::Left;
        }
    }
}

/// Whether the engine loaded now is the split one.
pub fn split_model_loaded(state: &AppState) -> bool {
    state
        .cluster
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|r| matches!(r.state, ClusterState::Joined | ClusterState::Lost))
}

/// A failure the engine reported: a DISTRIBUTED_ERROR while joined means a
/// rank was lost.
pub fn note_error(state: &AppState, error: &AppError) {
    if error.code != "DISTRIBUTED_ERROR" {
        return;
    }
    if let Some(run) = state.cluster.lock().unwrap().as_mut() {
        if run.state == ClusterState::Joined {
            run.state = ClusterState::Lost;
            run.error = Some(error.clone());
        }
    }
}

/// What the split engine loaded now says: this Mac's share of the model and
/// each rank's memory as its stats gathered it (kept: a lost ring shows the
/// last figures).
fn note_loaded(state: &AppState, share: Option<String>, memory: &[RankMemory]) {
    if let Some(run) = state.cluster.lock().unwrap().as_mut() {
        if run.state == ClusterState::Joined {
            run.share = share;
            if !memory.is_empty() {
                run.memory = memory.to_vec();
            }
        }
    }
}

/// The status now. Rank 0 learns of a lost rank when a collective fails: a
/// reply fails with DISTRIBUTED_ERROR, or the engine's stats, asked here
/// while joined, gather each rank's memory (at most once a second) and
/// find the ring broken (`split_error`), also while nothing runs; a rank
/// stuck rather than gone shows once a step or the gathering runs past the
/// step timeout.
pub async fn status(state: &AppState) -> ClusterStatus {
    if state.cluster.lock().unwrap().as_ref().is_some_and(|r| r.state == ClusterState::Joined) {
        if let Some(engine) = state.engine.engine() {
            // while joined, the engine loaded is the split one (`left`)
            let share = engine.model_info().share.clone();
            match engine.stats_async().await {
                Ok(stats) => {
                    note_loaded(state, share, &stats.ranks);
                    // Gathering the ranks' memory found the ring broken.
                    if let Some(why) = stats.split_error {
                        note_error(state, &AppError::new("DISTRIBUTED_ERROR", why));
                    }
                }
                Err(e) => note_error(state, &AppError::from(e)),
            }
        }
    }
    let settings = state.settings().cluster;
    // the files to copy to the other machines exist before the first load
    let prepared = match settings.enabled {
        true => prepare_files(&settings, &state.paths),
        false => Ok(()),
    };
    let run = state.cluster.lock().unwrap().clone();
    let mut status = status_of(&settings, run.as_ref(), &state.paths);
    if let (Err(e), None) = (prepared, &status.error) {
        status.error = Some(e);
    }
    status
}

/// Writes the hostfile from the hosts (when listed) and makes the ring
/// secret, so the user can copy both before anything loads.
fn prepare_files(settings: &ClusterSettings, paths: &Paths) -> AppResult<()> {
    settings.hostfile_path(paths)?;
    cluster_secret::ensure(paths)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> RingSecret {
        RingSecret::new(b"a secret of sixteen bytes or more").unwrap()
    }

    fn paths() -> Paths {
        Paths { data_dir: "/data".into(), models_dir: "/data/models".into() }
    }

    fn on(hosts: &[&str]) -> ClusterSettings {
        ClusterSettings {
            enabled: true,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn off_by_default_and_anything_goes_while_off() {
        let s = ClusterSettings::default();
        assert!(!s.enabled);
        assert_eq!(s.join_timeout_secs, 120);
        assert_eq!(s.split, ClusterSplit::Auto);
        ClusterSettings { hosts: vec!["not a host".into()], ..s }.validate().unwrap();
    }

    #[test]
    fn the_split_is_saved_reaches_the_group_and_older_settings_load_as_auto() {
        // a settings file from before the choice existed
        let old: ClusterSettings =
            serde_json::from_str(r#"{"enabled":true,"hostfile":"","hosts":["10.0.0.1:5000","10.0.0.2:5000"],"join_timeout_secs":30}"#)
                .unwrap();
        assert_eq!((old.split, old.join_timeout_secs), (ClusterSplit::Auto, 30));
        assert_eq!(old.group_config(secret()).split, Split::Auto);
        let piped = ClusterSettings { split: ClusterSplit::Pipeline, ..old };
        let json = serde_json::to_value(&piped).unwrap();
        assert_eq!(json["split"], "pipeline");
        assert_eq!(serde_json::from_value::<ClusterSettings>(json).unwrap(), piped);
        let group = piped.group_config(secret());
        assert_eq!(
            (group.split, group.connect_timeout),
            (Split::Pipeline, Duration::from_secs(30))
        );
        // only ranks that prove the secret join (the engine's ring gate)
        assert!(group.ring_secret.is_some());
        assert_eq!(
            ClusterSettings { split: ClusterSplit::Tensor, ..piped }.group_config(secret()).split,
            Split::Tensor
        );
        assert!(serde_json::from_str::<ClusterSettings>(r#"{"split":"sideways"}"#).is_err());
    }

    #[test]
    fn the_other_macs_are_told_the_same_split() {
        let status = status_of(
            &ClusterSettings {
                split: ClusterSplit::Pipeline,
                ..on(&["10.0.0.1:5000", "10.0.0.2:5000", "[fd00::3]:5000"])
            },
            None,
            &paths(),
        );
        assert_eq!(status.split, ClusterSplit::Pipeline);
        assert_eq!(status.ranks[0].command, None, "rank 0 is this Mac");
        assert_eq!(status.ranks[0].copy_command, None);
        assert_eq!(
            status.ranks[2].command.as_deref(),
            Some("vlm serve --model <the same model folder> --distributed cluster-hostfile.json --rank 2 --split pipeline --ring-secret-file cluster-ring.secret")
        );
        // the hostfile and the secret go to the home folder a new terminal opens in
        assert_eq!(
            status.ranks[1].copy_command.as_deref(),
            Some("scp /data/cluster-hostfile.json /data/cluster-ring.secret 10.0.0.2:")
        );
        assert_eq!(
            status.ranks[2].copy_command.as_deref(),
            Some("scp /data/cluster-hostfile.json /data/cluster-ring.secret [fd00::3]:")
        );
        assert_eq!(status.secret_path.as_deref(), Some("/data/cluster-ring.secret"));
        assert!(follower_command(1, ClusterSplit::Auto, "h.json").ends_with(
            "--distributed h.json --rank 1 --split auto --ring-secret-file cluster-ring.secret"
        ));
    }

    #[test]
    fn the_commands_name_the_files_as_one_shell_word_each() {
        // a Mac's data folder, and a hostfile of one's own
        let mac = Paths {
            data_dir: "/Users/me/Library/Application Support/vlm-chat".into(),
            models_dir: "/m".into(),
        };
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("it's my ring.json");
        std::fs::write(&own, r#"[["10.0.0.1:5000"], ["10.0.0.2:5000"]]"#).unwrap();
        let s = ClusterSettings { hostfile: own.display().to_string(), ..on(&[]) };
        let status = status_of(&s, None, &mac);
        assert_eq!(
            status.ranks[1].copy_command.as_deref().unwrap(),
            format!(
                "scp '{}/it'\\''s my ring.json' '/Users/me/Library/Application Support/vlm-chat/cluster-ring.secret' 10.0.0.2:",
                dir.path().display()
            )
        );
        let command = status.ranks[1].command.as_deref().unwrap();
        assert!(command.contains(" --distributed 'it'\\''s my ring.json' --rank 1 "), "{command}");
        // what a shell makes of it: the same words
        let words = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "printf '%s\\n' {}",
                    &status.ranks[1].copy_command.as_deref().unwrap()[4..]
                ),
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(words.stdout).unwrap(),
            format!(
                "{}\n/Users/me/Library/Application Support/vlm-chat/cluster-ring.secret\n10.0.0.2:\n",
                own.display()
            )
        );
    }

    #[test]
    fn hosts_are_ip_port_one_per_rank_and_at_least_two() {
        on(&["10.0.0.1:5000", "", " 10.0.0.2:5000 "]).validate().unwrap();
        let (h, path) = on(&["10.0.0.1:5000", "10.0.0.2:5001"]).hostfile_contents().unwrap();
        assert!(path.is_none());
        assert_eq!(h.to_json(), r#"[["10.0.0.1:5000"],["10.0.0.2:5001"]]"#);
        assert!(on(&["10.0.0.1:5000"]).validate().unwrap_err().contains("at least 2 ranks"));
        let err = on(&["10.0.0.1:5000", "mac-studio.local:5000"]).validate().unwrap_err();
        assert!(err.contains("rank 1") && err.contains("not ip:port"), "{err}");
        let err = ClusterSettings { join_timeout_secs: 0, ..on(&["10.0.0.1:1", "10.0.0.2:1"]) }
            .validate()
            .unwrap_err();
        assert!(err.contains("join timeout"), "{err}");
    }

    #[test]
    fn a_hostfile_is_read_as_mlx_reads_it_and_wins_over_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts.json");
        std::fs::write(&file, r#"[["10.0.0.1:5000"], ["10.0.0.2:5000"], ["10.0.0.3:5000"]]"#)
            .unwrap();
        let s = ClusterSettings { hostfile: file.display().to_string(), ..on(&["1.2.3.4:1"]) };
        let (h, path) = s.hostfile_contents().unwrap();
        assert_eq!((h.size(), path.as_deref()), (3, Some(file.as_path())));
        std::fs::write(&file, "[]").unwrap();
        assert!(s.validate().unwrap_err().contains("no ranks"));
        let missing =
            ClusterSettings { hostfile: dir.path().join("nope.json").display().to_string(), ..s };
        assert!(missing.validate().unwrap_err().contains("is not a file"));
    }

    #[test]
    fn the_hosts_are_written_to_the_data_folder() {
        let dir = tempfile::tempdir().unwrap();
        let paths =
            Paths { data_dir: dir.path().join("data"), models_dir: dir.path().join("models") };
        let (path, h) = on(&["127.0.0.1:5000", "127.0.0.1:5001"]).hostfile_path(&paths).unwrap();
        assert_eq!(path, paths.data_dir.join(HOSTFILE_NAME));
        assert_eq!(Hostfile::read(&path).unwrap(), h);
    }

    #[test]
    fn the_status_says_what_rank_0_knows_and_when_to_restart() {
        let s = on(&["10.0.0.1:5000", "10.0.0.2:5000"]);
        let before = status_of(&s, None, &paths());
        assert_eq!(before.state, ClusterState::NotJoined);
        assert_eq!(before.ranks.len(), 2);
        assert!(before.ranks[0].this_mac && !before.ranks[1].this_mac);
        assert_eq!(before.ranks[1].addresses, vec!["10.0.0.2:5000"]);
        assert!(!before.restart_needed);
        assert!(status_of(&on(&["10.0.0.1:5000"]), None, &paths())
            .error
            .unwrap()
            .message
            .contains("at least 2"));

        let mut run = ClusterRun {
            hostfile_path: "/tmp/h.json".into(),
            hostfile: s.hostfile_contents().unwrap().0,
            state: ClusterState::Joined,
            error: None,
            model_id: "dir:tiny".into(),
            split: ClusterSplit::Tensor,
            share: Some("layers 0..4 of 8, pipeline rank 0 of 2".into()),
            memory: Vec::new(),
        };
        let joined = status_of(&s, Some(&run), &paths());
        assert_eq!(joined.state, ClusterState::Joined);
        assert!(joined.ranks.iter().all(|r| r.state == ClusterState::Joined));
        assert!(!joined.restart_needed);
        // the run's split, not the settings' (auto here)
        assert_eq!(joined.split, ClusterSplit::Tensor);
        let command = joined.ranks[1].command.as_deref().unwrap();
        assert!(command.contains("--distributed h.json --rank 1 --split tensor "), "{command}");
        assert_eq!(
            joined.ranks[1].copy_command.as_deref(),
            Some("scp /tmp/h.json /data/cluster-ring.secret 10.0.0.2:"),
            "the hostfile the run read"
        );
        // this Mac's share on its line; memory unknown until gathered
        assert_eq!(
            joined.ranks[0].share.as_deref(),
            Some("layers 0..4 of 8, pipeline rank 0 of 2")
        );
        assert_eq!(joined.ranks[1].share, None);
        assert!(joined.ranks.iter().all(|r| r.weights_bytes.is_none() && r.kv_bytes.is_none()));
        let m = |rank, weights_bytes, kv_bytes| RankMemory {
            rank,
            weights_bytes,
            kv_bytes,
            active_bytes: 0,
            peak_bytes: 0,
        };
        run.memory = vec![m(0, 3_900_000_000, 0), m(1, 4_100_000_000, 120_000_000)];
        let gathered = status_of(&s, Some(&run), &paths());
        assert_eq!(
            (gathered.ranks[0].weights_bytes, gathered.ranks[0].kv_bytes),
            (Some(3_900_000_000), Some(0))
        );
        assert_eq!(
            (gathered.ranks[1].weights_bytes, gathered.ranks[1].kv_bytes),
            (Some(4_100_000_000), Some(120_000_000))
        );
        // another ring in the settings: MLX keeps the first one
        assert!(
            status_of(&on(&["10.0.0.1:5000", "10.0.0.3:5000"]), Some(&run), &paths())
                .restart_needed
        );
        run.state = ClusterState::Lost;
        let lost = status_of(&s, Some(&run), &paths());
        assert!(lost.restart_needed && lost.ranks.iter().all(|r| r.state == ClusterState::Lost));
        // turned off: nothing to restart for
        assert!(
            !status_of(&ClusterSettings { enabled: false, ..s }, Some(&run), &paths())
                .restart_needed
        );
    }
}
