//! `vlm bulk`: one prompt over many images, run as one continuous batch, with
//! a progress bar and a results table (CSV, or JSON Lines for `.jsonl`).
//! Run again with the same `--out`, it keeps the rows already done and asks
//! only the rest; Ctrl-C stops cleanly and writes what is done.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bulk::export::{self, Columns};
use bulk::{
    AnswerFormat, CancelToken, ImageSource, Item, JobSpec, Pass, Row, RowStatus, RunConfig,
};
use clap::Args;
use engine::sample::SamplingParams;
use indicatif::{ProgressBar, ProgressStyle};

use crate::ModelArgs;

#[derive(Args)]
pub struct BulkArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Asked about every image.
    #[arg(long)]
    pub prompt: String,
    /// Answers follow this JSON Schema (a file); its top-level properties
    /// become columns.
    #[arg(long, value_name = "PATH", group = "format")]
    pub schema: Option<PathBuf>,
    /// Answers are JSON with these fields (comma-separated), one column each.
    #[arg(long, value_name = "A,B,C", group = "format")]
    pub columns: Option<String>,
    #[arg(long, default_value_t = bulk::job::DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// 0 is greedy decoding: the same image gets the same answer.
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    /// The results table: CSV, or JSON Lines if it ends in .jsonl. If it
    /// exists, its done rows are kept and those images skipped.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    /// Image files and folders (a folder's images, not its subfolders).
    #[arg(required = true, value_name = "IMAGES")]
    pub images: Vec<PathBuf>,
}

/// Exit status after Ctrl-C (128 + SIGINT): the table is written but not complete.
const INTERRUPTED: i32 = 130;
/// The results file is rewritten at most this often while rows arrive, so a
/// crash loses little.
const SAVE_EVERY: Duration = Duration::from_secs(2);

fn answer_format(a: &BulkArgs) -> Result<Option<AnswerFormat>> {
    let format = if let Some(path) = &a.schema {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let schema = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        Some(AnswerFormat::Schema { schema })
    } else {
        a.columns.as_deref().map(AnswerFormat::fields_from_list)
    };
    if let Some(f) = &format {
        f.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(format)
}

/// The rows of an earlier run of this table that are done, by image name.
fn earlier_answers(out: &Path) -> Result<HashMap<String, Row>> {
    if !out.exists() {
        return Ok(HashMap::new());
    }
    let rows = export::read_file(out).with_context(|| {
        format!(
            "{} exists but cannot be read as a results table (move it away to start over)",
            out.display()
        )
    })?;
    Ok(rows
        .into_iter()
        .filter(|r| r.status == RowStatus::Done)
        .map(|r| (r.name.clone(), r))
        .collect())
}

pub fn run(a: BulkArgs) -> Result<()> {
    let format = answer_format(&a)?;
    let collected = bulk::collect_images(&a.images)?;
    for skipped in &collected.skipped {
        eprintln!("skipped {}: {}", skipped.path.display(), skipped.why);
    }
    let paths = collected.images;
    if paths.is_empty() {
        bail!(
            "no images found in {}",
            a.images.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let mut earlier = earlier_answers(&a.out)?;
    let mut table: Vec<Row> = names
        .iter()
        .map(|n| earlier.remove(n).unwrap_or_else(|| Row::pending(n.as_str())))
        .collect();
    let kept = table.iter().filter(|r| r.status == RowStatus::Done).count();
    if kept > 0 {
        eprintln!(
            "{} already holds {kept} of these {} images' answers: asking about the other {}",
            a.out.display(),
            table.len(),
            table.len() - kept
        );
    }

    let engine = a.model.start_engine()?;
    let info = engine.model_info();
    if !info.capabilities.vision {
        bail!("{} cannot see images: pick a vision model (--model)", info.name);
    }
    let job = JobSpec {
        prompt: a.prompt.clone(),
        format: format.clone(),
        max_tokens: a.max_tokens,
        sampling: SamplingParams { temperature: a.temp, seed: a.seed, ..Default::default() },
    };
    let columns = Columns::for_format(format.as_ref());
    let items: Vec<Item> = (0..table.len())
        .filter(|&i| table[i].needs(Pass::AllButDone))
        .map(|i| Item {
            index: i,
            name: names[i].clone(),
            source: ImageSource::Path(paths[i].clone()),
        })
        .collect();
    let to_run = items.len();

    let bar = ProgressBar::new(table.len() as u64).with_position(kept as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len}{msg}")
            .expect("a valid template")
            .progress_chars("█▉ "),
    );
    bar.set_message(format!(" · {}", info.name));

    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let cancel = CancelToken::default();
    let (summary, took) = runtime.block_on(async {
        let on_ctrl_c = cancel.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        let mut last_save = Instant::now();
        let started = Instant::now();
        let config = RunConfig::for_batch(a.model.max_running);
        let summary = bulk::run(&engine, &job, items, config, &cancel, |update, progress| {
            table[update.index] = update.row.clone();
            bar.inc(1);
            let eta = progress.eta().map(|d| format!(" · ETA {}", clock(d))).unwrap_or_default();
            let failed = if progress.failed > 0 {
                format!(" · {} failed", progress.failed)
            } else {
                String::new()
            };
            bar.set_message(format!("{failed}{eta}"));
            if last_save.elapsed() >= SAVE_EVERY {
                if let Err(e) = export::write_file(&a.out, &table, &columns) {
                    bar.println(format!("cannot write {}: {e}", a.out.display()));
                }
                last_save = Instant::now();
            }
        })
        .await;
        watcher.abort();
        (summary, started.elapsed())
    });
    bar.finish_and_clear();
    let ran = summary.progress.done + summary.progress.failed;
    // a rate over a fraction of a second says nothing
    if ran > 0 && took >= Duration::from_secs(1) {
        let per_minute = ran as f64 / took.as_secs_f64() * 60.0;
        eprintln!("{ran} images in {:.1} s ({per_minute:.0} a minute)", took.as_secs_f64());
    }
    let interrupted = cancel.is_cancelled();
    engine.shutdown();
    export::write_file(&a.out, &table, &columns)
        .with_context(|| format!("writing {}", a.out.display()))?;

    let failed: Vec<&Row> = table.iter().filter(|r| r.status == RowStatus::Failed).collect();
    const SHOWN: usize = 10;
    for row in failed.iter().take(SHOWN) {
        eprintln!(
            "failed: {}: {} ({})",
            row.name,
            row.error.as_deref().unwrap_or(""),
            row.error_code.as_deref().unwrap_or("")
        );
    }
    if failed.len() > SHOWN {
        eprintln!("… and {} more failed (see {})", failed.len() - SHOWN, a.out.display());
    }
    let (done, failed) = bulk::row::counts(&table);
    let left = table.len() - done - failed;
    let mut summary = format!("{done} done, {failed} failed");
    if left > 0 {
        summary.push_str(&format!(", {left} not run (run the same command again to finish)"));
    }
    eprintln!("{summary} — {} ({to_run} asked this run)", a.out.display());
    if interrupted {
        std::process::exit(INTERRUPTED);
    }
    Ok(())
}

/// 75 s → "1:15".
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}
