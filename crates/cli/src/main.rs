//! `vlm`: the engine from the command line.
//!
//!   vlm chat
//!   vlm generate --model default --prompt "What is the capital of France?"
//!   vlm generate --model <vision model> --image photo.jpg --prompt "What is in this picture?"
//!   vlm serve --model default --port 8080       (OpenAI-compatible API)
//!   vlm convert model.gguf out-folder [--dtype float32]
//!   vlm bench --model <folder|file.gguf|default>
//!   vlm bulk --model <vision model> --prompt "…" [--columns a,b | --schema s.json] --out results.csv images/
mod bench;
mod bulk_job;
mod speculation_lines;
mod split_model;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use engine::batch::speculation::SpeculationConfig;
use engine::batch::{Event, ImageInput, Prompt, Request, SchedulerConfig};
use engine::cache::prefix_disk::DiskPrefixConfig;
use engine::cache::KvQuantization;
use engine::handle::{Completion, EngineConfig, EngineHandle};
use engine::model::{self, LoadOptions, LoadedModel, WeightFormat};
use engine::sample::SamplingParams;
use engine::tokenizer::{ChatMessage, ContentPart, MessageContent, TemplateOptions};

#[derive(Parser)]
#[command(name = "vlm", version, about = "Local language and vision-language models on MLX")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Chat in the terminal: type a message, read the streamed reply.
    Chat(ChatArgs),
    /// Answer one prompt, streaming tokens to stdout; stats go to stderr.
    Generate(GenerateArgs),
    /// Serve the OpenAI-compatible API (/v1/chat/completions, /v1/models, /health).
    Serve(ServeArgs),
    /// Write a GGUF model as an mlx-community folder (config.json, safetensors, tokenizer).
    Convert(ConvertArgs),
    /// Measure prompt and decode speed.
    Bench(BenchArgs),
    /// Ask one prompt about many images (files and folders) as one batch; a
    /// results table (CSV or JSON Lines) that a second run resumes.
    Bulk(bulk_job::BulkArgs),
}

#[derive(Args)]
struct ModelArgs {
    /// A model folder, a .gguf file, or `default` (SmolLM2-135M-Instruct).
    #[arg(long, default_value = "default")]
    model: String,
    /// How to hold quantized weights: as stored, or dequantized to float32
    /// (the default on the CPU backend, where float matmuls are much faster).
    #[arg(long, value_enum)]
    weights: Option<WeightsArg>,
    /// Quantize the KV cache to 4 or 8 bits (all layers but the last).
    #[arg(long)]
    kv_bits: Option<i32>,
    #[arg(long, default_value_t = 64)]
    kv_group_size: i32,
    /// Start quantizing the KV cache once it holds this many tokens.
    #[arg(long, default_value_t = 256)]
    kv_start: usize,
    /// Most requests decoding at once.
    #[arg(long, default_value_t = 8)]
    max_running: usize,
    /// Most work between two decode steps: prompt tokens prefilled plus image
    /// patches through the vision tower. Lower keeps running replies smoother
    /// while new requests (and images) come in; higher starts them sooner.
    #[arg(long, default_value_t = engine::generate::PREFILL_CHUNK)]
    step_budget: usize,
    /// Also keep finished conversations' KV cache in this folder, so a chat
    /// continued after a restart prefills only its new message.
    #[arg(long, value_name = "FOLDER")]
    prefix_cache_dir: Option<PathBuf>,
    /// Most gigabytes the --prefix-cache-dir folder may take (least recently
    /// used files go first).
    #[arg(long, default_value_t = 4.0)]
    prefix_cache_disk_gb: f64,
    /// Speculative decoding: `lookup` drafts from the reply's own prompt
    /// and output (no second model); `draft` with a smaller model of the
    /// same tokenizer (--draft-model); `mtp` with the model's own
    /// multi-token-prediction head (Qwen3.5 checkpoints with `mtp.*`
    /// tensors), or with --draft-model the head of mlx-vlm's split drafter
    /// folder (`split_mtp`) for a checkpoint without one; `assistant` with
    /// a Gemma 4 assistant drafter folder (--draft-model). Greedy output
    /// stays exactly the same.
    #[arg(long, value_enum)]
    draft_kind: Option<DraftKindArg>,
    /// The draft model (a folder or .gguf) for `--draft-kind draft`; given
    /// alone it implies that kind. With `--draft-kind mtp`: a split head's
    /// folder; with `--draft-kind assistant`: the assistant's folder.
    #[arg(long, value_name = "PATH")]
    draft_model: Option<PathBuf>,
    /// Draft exactly N tokens per step, whatever lands (as mlx-lm's
    /// --num-draft-tokens; no early stop unless --draft-stop-below is
    /// given). Without it lookup and mtp adapt each reply's draft to how
    /// many of its drafts land (up to 6 and 3); a draft model drafts 3,
    /// pausing a reply whose drafts missed twice in a row.
    #[arg(long, value_name = "N")]
    num_draft_tokens: Option<usize>,
    /// A draft model guesses among the vocabulary's first N tokens (and
    /// its special ones) only: a small model's output head is a large part
    /// of each draft pass. Default 65536; 0: the whole vocabulary. Greedy
    /// output stays the same.
    #[arg(long, value_name = "N")]
    draft_vocabulary: Option<usize>,
    /// A draft model ends a reply's draft at a token it gives less than
    /// probability P, skipping the passes after a likely miss. 0: never.
    /// Greedy output stays the same.
    #[arg(long, value_name = "P")]
    draft_stop_below: Option<f32>,
    /// Speculate only while at most N replies decode (default 4 for every
    /// kind): in a larger batch one plain pass already keeps the machine
    /// busy and a verify pass costs more than it saves. A large N keeps
    /// speculating in any batch, to measure where it stops paying
    /// (`scripts/bench-speculation.sh --crossover`).
    #[arg(long, value_name = "N")]
    speculation_max_batch: Option<usize>,
}

#[derive(Clone, Copy, ValueEnum)]
enum DraftKindArg {
    Lookup,
    Draft,
    Mtp,
    Assistant,
}

#[derive(Clone, Copy, ValueEnum)]
enum WeightsArg {
    AsStored,
    Float32,
}

impl ModelArgs {
    fn format(&self) -> WeightFormat {
        match self.weights {
            Some(WeightsArg::AsStored) => WeightFormat::AsStored,
            Some(WeightsArg::Float32) => WeightFormat::Float32,
            None => WeightFormat::default(),
        }
    }

    /// What --draft-kind, --draft-model, --num-draft-tokens and
    /// --speculation-max-batch ask for.
    fn speculation(&self) -> Result<Option<SpeculationConfig>> {
        let mut config = match (self.draft_kind, &self.draft_model) {
            (None, None) if self.speculation_max_batch.is_some() => {
                anyhow::bail!("--speculation-max-batch needs --draft-kind or --draft-model")
            }
            (None, None) => return Ok(None),
            (Some(DraftKindArg::Lookup), None) => SpeculationConfig::prompt_lookup(),
            (Some(DraftKindArg::Mtp), None) => SpeculationConfig::mtp(),
            (Some(DraftKindArg::Mtp), Some(folder)) => {
                SpeculationConfig::mtp_folder(folder.clone())
            }
            (Some(DraftKindArg::Assistant), Some(folder)) => {
                SpeculationConfig::assistant(folder.clone())
            }
            (Some(DraftKindArg::Assistant), None) => {
                anyhow::bail!(
                    "--draft-kind assistant needs --draft-model FOLDER (the assistant's folder)"
                )
            }
            (Some(DraftKindArg::Lookup), Some(_)) => {
                anyhow::bail!("--draft-model is for --draft-kind draft or mtp")
            }
            (Some(DraftKindArg::Draft), None) => {
                anyhow::bail!("--draft-kind draft needs --draft-model PATH")
            }
            (_, Some(path)) => SpeculationConfig::draft_model(path.clone()),
        };
        if let Some(n) = self.num_draft_tokens {
            // Exactly n, as mlx-lm's: no early stop either (unless asked for below).
            config.max_draft_tokens = n;
            config.adaptive = false;
            config.stop_below = 0.0;
        }
        if let Some(n) = self.draft_vocabulary {
            config.draft_vocabulary = n;
        }
        if let Some(p) = self.draft_stop_below {
            anyhow::ensure!((0.0..=1.0).contains(&p), "--draft-stop-below must be between 0 and 1");
            config.stop_below = p;
        }
        if let Some(n) = self.speculation_max_batch {
            anyhow::ensure!(n > 0, "--speculation-max-batch must be at least 1");
            config.max_batch = n;
        }
        Ok(Some(config))
    }

    fn load(&self) -> Result<LoadedModel> {
        let path = resolve_model(&self.model)?;
        model::load(&path, &LoadOptions { format: self.format() })
            .with_context(|| format!("loading {}", path.display()))
    }
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long)]
    prompt: String,
    /// An image file to ask about (repeat for several); needs a vision model.
    #[arg(long = "image", value_name = "PATH")]
    images: Vec<PathBuf>,
    /// A system message placed before the prompt.
    #[arg(long)]
    system: Option<String>,
    /// Send the prompt as is, without the chat template.
    #[arg(long)]
    raw: bool,
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// 0 is greedy decoding.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    top_k: i32,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    #[arg(long)]
    seed: Option<u64>,
    /// Ask a thinking model to think (chat templates that support it).
    #[arg(long)]
    think: Option<bool>,
    /// The answer follows this JSON Schema (a file).
    #[arg(long, value_name = "PATH", group = "format")]
    json_schema: Option<PathBuf>,
    /// The answer is a JSON object.
    #[arg(long, group = "format")]
    json: bool,
    /// The answer matches this regular expression.
    #[arg(long, value_name = "REGEX", group = "format")]
    regex: Option<String>,
    /// The answer follows this Lark grammar (a file; start rule `start`).
    #[arg(long, value_name = "PATH", group = "format")]
    grammar: Option<PathBuf>,
}

/// The answer format asked for on the command line, if any.
fn answer_constraint(a: &GenerateArgs) -> Result<Option<engine::constraint::Constraint>> {
    use engine::constraint::Constraint;
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    Ok(if let Some(path) = &a.json_schema {
        let schema = serde_json::from_str(&read(path)?)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        Some(Constraint::JsonSchema(schema))
    } else if a.json {
        Some(Constraint::JsonObject)
    } else if let Some(rx) = &a.regex {
        Some(Constraint::Regex(rx.clone()))
    } else if let Some(path) = &a.grammar {
        Some(Constraint::Lark(read(path)?))
    } else {
        None
    })
}

#[derive(Args)]
struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on. Anything but loopback exposes the model to the network.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Port to listen on (0 picks a free one; stdout says which).
    #[arg(long, default_value_t = server::DEFAULT_PORT)]
    port: u16,
    /// Require `Authorization: Bearer <key>`. Prefer VLM_API_KEY or
    /// --api-key-file: a key given here shows in the process list (`ps`).
    #[arg(long)]
    api_key: Option<String>,
    /// Read the API key from this file (its first line); wins over VLM_API_KEY.
    #[arg(long, value_name = "PATH", conflicts_with = "api_key")]
    api_key_file: Option<PathBuf>,
    /// Allow browser pages of any origin to call the API.
    #[arg(long)]
    cors: bool,
    /// A folder whose models `/v1/models` lists (default: the model's folder).
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Let `file:` image URLs name image files inside this folder (repeat for
    /// several). Off by default: clients send images as base64 `data:` URLs.
    #[arg(long = "allow-file-urls", value_name = "DIR")]
    file_url_folders: Vec<PathBuf>,
    /// Close a connection that sends no complete request header for this
    /// many seconds (a new one, or a kept-alive one between requests).
    #[arg(long, value_name = "SECONDS", default_value_t = server::DEFAULT_IDLE_TIMEOUT.as_secs())]
    idle_timeout: u64,
    /// Answer 408 and close the connection when a request body has not
    /// arrived this many seconds after its header.
    #[arg(long, value_name = "SECONDS", default_value_t = server::DEFAULT_BODY_TIMEOUT.as_secs())]
    body_timeout: u64,
    /// Most connections open at once; at the limit, the oldest connection
    /// that has not sent a request yet is closed to make room.
    #[arg(long, default_value_t = server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    #[command(flatten)]
    split: split_model::SplitArgs,
}

#[derive(Args)]
struct ConvertArgs {
    gguf: PathBuf,
    out: PathBuf,
    /// Keep the GGUF's quantization (MLX 4/8-bit, group 32) or dequantize.
    #[arg(long, value_enum, default_value = "as-stored")]
    dtype: WeightsArg,
}

#[derive(Args)]
struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// For the engine figures: spread the concurrent requests' prompt lengths
    /// evenly from this many tokens up to --prompt-tokens (default: all the same).
    #[arg(long)]
    min_prompt_tokens: Option<usize>,
    #[arg(long, default_value_t = 128)]
    gen_tokens: usize,
    /// Single-stream runs to average (after one warm-up); 0 skips the
    /// single-stream figures.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// For the engine figures: the concurrent requests share one
    /// --prompt-tokens prompt (prefilled once, then reused from the prefix
    /// cache) plus a token of their own, so they decode together over a long
    /// context without N long prefills first.
    #[arg(long)]
    shared_prompt: bool,
    /// Print one JSON object instead of a table (for scripts).
    #[arg(long)]
    json: bool,
    /// Also drive the continuous-batching engine with these numbers of
    /// concurrent requests (comma-separated; 0 for none).
    #[arg(long, default_value = "1,4,8", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Also measure join latency: a request arriving while 4 others decode.
    #[arg(long)]
    join: bool,
    /// Also run each engine figure with every request constrained to a
    /// JSON schema (long answers, so both decode --gen-tokens): structured
    /// output's cost per token.
    #[arg(long)]
    structured: bool,
    /// Also measure a chat's second-turn time to first token with and without
    /// the prefix cache, after a first message of this many words.
    #[arg(long)]
    turn2_words: Option<usize>,
    /// Also measure a chat continued after an engine restart: the next
    /// message's time to first token with the prefix cache's disk tier
    /// against without it, after a first message of this many words.
    #[arg(long)]
    restart_words: Option<usize>,
    /// Benchmark images instead (a vision model): the encode step on a
    /// vision-cache miss vs a hit, and time to first token for the image
    /// asked about twice (with the vision cache only, then with the prefix cache too).
    #[arg(long, value_name = "PATH")]
    image: Option<PathBuf>,
    /// With --image: also decode --gen-tokens with this many requests about
    /// the image at once (comma-separated, e.g. 1,8): decode tok/s with image
    /// tokens in every sequence.
    #[arg(long, value_delimiter = ',', value_name = "N,…")]
    image_concurrency: Vec<usize>,
}

fn main() -> Result<()> {
    engine::batch::idle_memory::use_one_heap_arena();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve(_)) {
        // A server's log is its record: one line per request by default.
        server::logging::init_with_default("warn,server=info");
    } else {
        server::logging::init_cli();
    }
    match cli.command {
        Command::Serve(a) => run_serve(a),
        Command::Chat(a) => run_chat(a),
        Command::Generate(a) => run_generate(a),
        Command::Convert(a) => run_convert(a),
        Command::Bench(a) => run_bench(a),
        Command::Bulk(a) => bulk_job::run(a),
    }
}

fn resolve_model(spec: &str) -> Result<PathBuf> {
    if spec == "default" {
        return hub::default_model::locate().map_err(anyhow::Error::msg);
    }
    Ok(PathBuf::from(spec))
}

impl ModelArgs {
    /// Starts the continuous-batching engine on this model.
    fn start_engine(&self) -> Result<EngineHandle> {
        self.start_engine_in(None)
    }

    /// [`Self::start_engine`], as rank 0 of `group` when one is given.
    fn start_engine_in(
        &self,
        group: Option<engine::distributed::GroupConfig>,
    ) -> Result<EngineHandle> {
        let path = resolve_model(&self.model)?;
        let kv_quantization = self.kv_bits.map(|bits| KvQuantization {
            bits,
            group_size: self.kv_group_size,
            start: self.kv_start,
        });
        let scheduler = SchedulerConfig {
            kv_quantization,
            max_running: self.max_running,
            prefill_budget: self.step_budget,
            // running replies keep their pace while new requests come in
            pace_to_decode: true,
            prefix_disk: self.prefix_cache_dir.as_ref().map(|folder| DiskPrefixConfig {
                folder: folder.clone(),
                capacity_bytes: (self.prefix_cache_disk_gb.max(0.0) * 1e9) as u64,
            }),
            speculation: self.speculation()?,
            ..Default::default()
        };
        let config = EngineConfig { load: LoadOptions { format: self.format() }, scheduler };
        let engine = match group {
            None => EngineHandle::start(&path, config),
            Some(group) => EngineHandle::start_distributed(&path, config, group),
        }
        .with_context(|| format!("loading {}", path.display()))?;
        if kv_quantization.is_some() {
            eprintln!("KV cache quantization: {}", engine.stats()?.kv_quantization);
        }
        Ok(engine)
    }
}

/// Streams one request's events: the answer to stdout, thinking dimmed to
/// stderr. Returns the gathered reply.
fn stream_reply(engine: &EngineHandle, request: Request) -> Completion {
    let mut stdout = std::io::stdout();
    let mut stream = engine.submit(request);
    let mut reply = Completion::default();
    while let Some(event) = stream.recv_blocking() {
        match &event {
            Event::Content(t) => {
                let _ = stdout.write_all(t.as_bytes());
                let _ = stdout.flush();
            }
            Event::Reasoning(t) => eprint!("\x1b[2m{t}\x1b[0m"),
            Event::ToolCall(call) => println!("[tool call] {}({})", call.name, call.arguments),
            Event::Error(e) => eprintln!("error: {} ({})", e.message, e.code),
            Event::Logprob(_)
            | Event::PromptLogprobs(_)
            | Event::Accepted
            | Event::Queued { .. }
            | Event::Finished { .. } => {}
        }
        if reply.absorb(event) {
            break;
        }
    }
    reply
}

fn run_generate(a: GenerateArgs) -> Result<()> {
    let images = read_images(&a.images)?;
    let constraint = answer_constraint(&a)?;
    if a.raw && !images.is_empty() {
        anyhow::bail!("--image needs the chat template (drop --raw)");
    }
    let engine = a.model.start_engine()?;
    let base_model = !engine.model_info().has_chat_template;
    if base_model && !a.raw {
        eprintln!(
            "{} has no chat template (a base model): the prompt goes in as raw text",
            engine.model_info().name
        );
    }
    let prompt = if a.raw || (base_model && images.is_empty()) {
        Prompt::Text(a.prompt.clone())
    } else {
        let mut messages = Vec::new();
        if let Some(system) = &a.system {
            messages.push(ChatMessage::system(system.as_str()));
        }
        messages.push(user_message(&a.prompt, &images));
        Prompt::Chat {
            messages,
            options: TemplateOptions { enable_thinking: a.think, ..Default::default() },
        }
    };
    let sampling = SamplingParams {
        temperature: a.temp,
        top_p: a.top_p,
        top_k: a.top_k,
        min_p: a.min_p,
        repetition_penalty: a.repetition_penalty,
        seed: a.seed,
        ..Default::default()
    };
    let mut request = Request::new(prompt).with_max_tokens(a.max_tokens).with_sampling(sampling);
    request.images = images;
    request.constraint = constraint;
    let reply = stream_reply(&engine, request);
    println!();
    let peak = engine.stats().map(|s| s.peak_memory_bytes).unwrap_or(0);
    let st = &reply.stats;
    eprintln!(
        "[{}] prompt: {} tokens, {:.1} tok/s | generation: {} tokens, {:.1} tok/s | KV cache: {:.1} MB | peak memory: {:.1} MB",
        engine.model_info().name,
        st.prompt_tokens,
        st.prompt_tps,
        st.generated_tokens,
        st.generation_tps,
        st.kv_cache_bytes as f64 / 1e6,
        peak as f64 / 1e6,
    );
    engine.shutdown();
    match reply.error {
        Some(e) => anyhow::bail!("{} ({})", e.message, e.code),
        None => Ok(()),
    }
}

fn run_chat(a: ChatArgs) -> Result<()> {
    use std::io::BufRead;
    eprintln!("loading {} ...", a.model.model);
    let engine = a.model.start_engine()?;
    eprintln!(
        "{} is ready. Type a message; /image PATH attaches an image to the next one, /reset starts over, /exit or Ctrl-D quits.",
        engine.model_info().name
    );
    let mut history: Vec<ChatMessage> =
        a.system.iter().map(|s| ChatMessage::system(s.as_str())).collect();
    // Every image of the conversation so far, in the order the messages show them.
    let mut history_images: Vec<ImageInput> = Vec::new();
    let mut attached: Vec<ImageInput> = Vec::new();
    let sampling = SamplingParams { temperature: a.temp, seed: a.seed, ..Default::default() };
    let stdin = std::io::stdin();
    loop {
        eprint!("\n> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.retain(|m| m.role == "system");
                history_images.clear();
                attached.clear();
                eprintln!("(new conversation)");
                continue;
            }
            _ => {}
        }
        if let Some(path) = line.strip_prefix("/image ") {
            match read_images(&[PathBuf::from(path.trim())]) {
                Ok(mut one) => {
                    attached.append(&mut one);
                    eprintln!("({} image(s) attached to the next message)", attached.len());
                }
                Err(e) => eprintln!("{e:#}"),
            }
            continue;
        }
        history.push(user_message(line, &attached));
        let mut request = Request::new(Prompt::Chat {
            messages: history.clone(),
            options: TemplateOptions::default(),
        })
        .with_max_tokens(a.max_tokens)
        .with_sampling(sampling.clone());
        request.images = history_images.iter().chain(&attached).cloned().collect();
        let reply = stream_reply(&engine, request);
        println!();
        if reply.error.is_some() {
            // The conversation stays usable: drop the message that failed
            // (and its images, which may be what failed).
            history.pop();
            attached.clear();
            continue;
        }
        history_images.append(&mut attached);
        let st = &reply.stats;
        eprintln!(
            "[{} tokens, {:.1} tok/s, first token after {:.2}s, {} of {} prompt tokens cached, KV cache {:.1} MB]",
            st.generated_tokens,
            st.generation_tps,
            st.time_to_first_token.as_secs_f64(),
            st.cached_prompt_tokens,
            st.prompt_tokens,
            st.kv_cache_bytes as f64 / 1e6
        );
        let mut message = ChatMessage::assistant(reply.content.as_str());
        if !reply.reasoning.is_empty() {
            message.reasoning_content = Some(reply.reasoning.clone());
        }
        history.push(message);
    }
    engine.shutdown();
    Ok(())
}

/// Reads image files for a request (the engine checks that they are images).
fn read_images(paths: &[PathBuf]) -> Result<Vec<ImageInput>> {
    paths
        .iter()
        .map(|p| {
            Ok(ImageInput::from_bytes(
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
            ))
        })
        .collect()
}

/// A user message: the images first (as most vision chats show them), then the text.
fn user_message(text: &str, images: &[ImageInput]) -> ChatMessage {
    if images.is_empty() {
        return ChatMessage::user(text);
    }
    let mut parts: Vec<ContentPart> =
        images.iter().map(|i| ContentPart::Image { image: Some(i.sha256.clone()) }).collect();
    parts.push(ContentPart::text(text));
    ChatMessage { content: MessageContent::Parts(parts), ..ChatMessage::user("") }
}

fn run_vision_bench(a: &BenchArgs, image: &std::path::Path) -> Result<()> {
    let bytes = std::fs::read(image).with_context(|| format!("reading {}", image.display()))?;
    let loaded = a.model.load()?;
    let encode = bench::vision_encode(&loaded, &bytes, a.runs)?;
    let name = loaded.info.name.clone();
    drop(loaded);
    let path = resolve_model(&a.model.model)?;
    let start = |prefix_cache_bytes: usize| {
        let scheduler = SchedulerConfig { prefix_cache_bytes, ..Default::default() };
        EngineHandle::start(
            &path,
            EngineConfig { load: LoadOptions { format: a.model.format() }, scheduler },
        )
    };
    // The vision cache alone: the repeat still prefills its whole prompt.
    let engine = start(0)?;
    let vision_only = bench::vision_ttft(&engine, &bytes, a.runs)?;
    engine.shutdown();
    // With the prefix cache as well: the repeat reuses the prompt's KV.
    let engine = start(SchedulerConfig::default().prefix_cache_bytes)?;
    let both = bench::vision_ttft(&engine, &bytes, a.runs)?;
    let mut decode = Vec::new();
    if a.image_concurrency.iter().any(|&n| n > 0) {
        bench::vision_decode(&engine, &bytes, 1, 4)?; // warm-up
        for &n in a.image_concurrency.iter().filter(|&&n| n > 0) {
            decode.push(bench::vision_decode(&engine, &bytes, n, a.gen_tokens)?);
        }
    }
    engine.shutdown();
    if a.json {
        println!(
            "{}",
            serde_json::json!({"encode": encode, "ttft_vision_cache": vision_only, "ttft_prefix_cache": both, "decode": decode})
        );
        return Ok(());
    }
    println!("model              {name}");
    println!(
        "image              {} → grid {:?}, {} image tokens",
        image.display(),
        encode.grid,
        encode.image_tokens
    );
    println!(
        "encode on a miss   {:.4} s (preprocess {:.4} s + vision tower {:.4} s)",
        encode.miss_secs, encode.preprocess_secs, encode.tower_secs
    );
    println!("encode on a hit    {:.6} s ({:.0}x faster)", encode.hit_secs, encode.hit_speedup);
    println!(
        "TTFT, fresh image  {:.3} s ({} prompt tokens; prefill alone {:.1} tok/s; median of the runs)",
        vision_only.first_ttft_secs, vision_only.prompt_tokens, vision_only.first_prompt_tps
    );
    println!(
        "TTFT, same image   {:.3} s with the vision cache (whole prompt prefilled again)",
        vision_only.repeat_ttft_secs
    );
    println!(
        "TTFT, same image   {:.3} s with the prefix cache too ({} of {} prompt tokens reused)",
        both.repeat_ttft_secs, both.repeat_cached_tokens, both.prompt_tokens
    );
    for b in &decode {
        println!("decode x{:<2} images  aggregate {:.1} tok/s, per request {:.1} tok/s ({} tokens each, prompts {} tokens)",
            b.concurrency, b.aggregate_decode_tps, b.per_request_decode_tps, b.gen_tokens, b.prompt_tokens);
    }
    Ok(())
}

/// Longer than any API key by far; a file this big is not a key file.
const MAX_API_KEY_FILE_BYTES: u64 = 4096;

/// The API key: `--api-key`, else the first line of `--api-key-file`, else
/// `VLM_API_KEY`. The file is checked before it is read: a FIFO would block
/// the start for ever, a large file is the wrong file.
fn api_key(flag: Option<String>, file: Option<&Path>) -> Result<Option<String>> {
    if let Some(path) = file {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("--api-key-file {}", path.display()))?;
        anyhow::ensure!(meta.is_file(), "--api-key-file {}: not a regular file", path.display());
        anyhow::ensure!(
            meta.len() <= MAX_API_KEY_FILE_BYTES,
            "--api-key-file {}: {} bytes; a key file holds one line",
            path.display(),
            meta.len()
        );
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--api-key-file {}", path.display()))?;
        let key = text.lines().next().unwrap_or("").trim();
        anyhow::ensure!(!key.is_empty(), "--api-key-file {}: the file is empty", path.display());
        return Ok(Some(key.to_owned()));
    }
    Ok(flag.or_else(|| std::env::var("VLM_API_KEY").ok()).filter(|k| !k.is_empty()))
}

/// How long open requests get to end after SIGTERM or Ctrl-C, once the
/// engine has stopped them, before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

fn run_serve(a: ServeArgs) -> Result<()> {
    let path = resolve_model(&a.model.model)?;
    for folder in &a.file_url_folders {
        anyhow::ensure!(folder.is_dir(), "--allow-file-urls {}: not a folder", folder.display());
    }
    if a.idle_timeout == 0 || a.body_timeout == 0 || a.max_connections == 0 {
        anyhow::bail!("--idle-timeout, --body-timeout and --max-connections must be at least 1");
    }
    let api_key = api_key(a.api_key.clone(), a.api_key_file.as_deref())?;
    let group = match a.split.role()? {
        None => None,
        Some(split_model::Role::Leader(group)) => Some(group),
        Some(split_model::Role::Follower { rank, group }) => {
            let followed = engine::distributed::run_follower(
                &path,
                &LoadOptions { format: a.model.format() },
                &group,
            )
            .with_context(|| format!("rank {rank} of the split model"))?;
            eprintln!("rank {rank}: rank 0 stopped after {} forward passes", followed.forwards);
            return Ok(());
        }
    };
    let config = server::ServerConfig {
        host: a.host,
        port: a.port,
        api_key,
        cors: a.cors,
        models_dir: a.models_dir.or_else(|| path.parent().map(PathBuf::from)),
        file_url_folders: a.file_url_folders,
        idle_timeout: Duration::from_secs(a.idle_timeout),
        body_timeout: Duration::from_secs(a.body_timeout),
        max_connections: a.max_connections,
        ..Default::default()
    };
    if !config.host.is_loopback() && config.api_key.is_none() {
        tracing::warn!(host = %config.host, "listening beyond this machine without an API key");
    }
    let runtime = tokio::runtime::Runtime::new()?;
    // The port first: a port in use is reported now, not after the model loads.
    let bound = runtime.block_on(server::bind(config))?;
    let engine = a.model.start_engine_in(group)?;
    let info = engine.model_info().clone();
    let state = server::ServerState::with_engine(engine);
    let stopped: Result<()> = runtime.block_on(async move {
        let stop_signal = StopSignal::listen()?;
        let mut running = bound.serve(state.clone());
        // One line on stdout, for scripts that start us on port 0.
        println!("listening on http://{} ({})", running.addr(), info.name);
        let signal = stop_signal.received().await;
        tracing::warn!(
            signal,
            "stopping: no new requests; requests under way end with engine_stopped"
        );
        running.stop_accepting();
        if let Some(engine) = state.unload() {
            // Ends every request in flight: each stream gets its error event and [DONE].
            tokio::task::spawn_blocking(move || engine.shutdown()).await?;
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, running.wait()).await.is_err() {
            tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; exiting anyway");
        }
        Ok(())
    });
    stopped
}

/// SIGTERM (what launchd, systemd and `kill` send) and SIGINT (Ctrl-C), both
/// meaning "stop serving, end what is under way properly, exit".
struct StopSignal {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Starts catching the signals (from here on they no longer kill the process).
    fn listen() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The name of the first signal that arrives.
    async fn received(mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.terminate.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

fn run_convert(a: ConvertArgs) -> Result<()> {
    let format = match a.dtype {
        WeightsArg::AsStored => WeightFormat::AsStored,
        WeightsArg::Float32 => WeightFormat::Float32,
    };
    engine::convert::gguf_to_folder(&a.gguf, &a.out, format)
        .with_context(|| format!("converting {}", a.gguf.display()))?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

fn run_bench(a: BenchArgs) -> Result<()> {
    if let Some(image) = &a.image {
        return run_vision_bench(&a, image);
    }
    let loaded = a.model.load()?;
    let single = match a.runs {
        0 => None,
        runs => Some(bench::single_stream(&loaded, a.prompt_tokens, a.gen_tokens, runs)?),
    };
    let info = loaded.info.clone();
    drop(loaded);
    let mut batches = Vec::new();
    let mut structured = Vec::new();
    let mut join = None;
    // What speculation did over the engine figures (off: nothing to say).
    let mut speculation = None;
    if a.concurrency.iter().any(|&n| n > 0) || a.join {
        let handle = a.model.start_engine()?;
        let min_prompt = a.min_prompt_tokens.unwrap_or(a.prompt_tokens);
        let schema = bench::long_answer_schema();
        let batch =
            |n: usize, gen_tokens: usize, constrained: bool| match (a.shared_prompt, constrained) {
                (true, false) => {
                    Ok(bench::engine_batch_shared_prompt(&handle, n, a.prompt_tokens, gen_tokens)?)
                }
                (true, true) => anyhow::bail!("--structured does not combine with --shared-prompt"),
                (false, c) => Ok(bench::engine_batch_spread(
                    &handle,
                    n,
                    min_prompt,
                    a.prompt_tokens,
                    gen_tokens,
                    c.then_some(&schema),
                )?),
            };
        // Warm-up, as the single-stream figures had (and llguidance's vocabulary).
        batch(1, 8, a.structured)?;
        for &n in a.concurrency.iter().filter(|&&n| n > 0) {
            batches.push(batch(n, a.gen_tokens, false)?);
            if a.structured {
                structured.push(batch(n, a.gen_tokens, true)?);
            }
        }
        if a.join {
            join = Some(bench::join_latency(&handle, 4, a.prompt_tokens)?);
        }
        speculation = Some(handle.stats()?.speculation);
        handle.shutdown();
    }
    let mut turn2 = None;
    // The draft model's own prefix cache over the two turns, when one drafts.
    let mut turn2_draft_cache = None;
    if let Some(words) = a.turn2_words {
        let with_cache = a.model.start_engine()?;
        let warm = bench::chat_turn2(&with_cache, words)?;
        turn2_draft_cache = with_cache.stats()?.speculation.draft_prefix_cache;
        with_cache.shutdown();
        let path = resolve_model(&a.model.model)?;
        let scheduler = SchedulerConfig { prefix_cache_bytes: 0, ..Default::default() };
        let without = EngineHandle::start(
            &path,
            EngineConfig { load: LoadOptions { format: a.model.format() }, scheduler },
        )?;
        let cold = bench::chat_turn2(&without, words)?;
        without.shutdown();
        turn2 = Some((warm, cold));
    }
    let mut restart = None;
    if let Some(words) = a.restart_words {
        let path = resolve_model(&a.model.model)?;
        let start = |folder: Option<&std::path::Path>| {
            let prefix_disk = folder
                .map(|f| DiskPrefixConfig { folder: f.to_path_buf(), capacity_bytes: 8 << 30 });
            let scheduler = SchedulerConfig { prefix_disk, ..Default::default() };
            EngineHandle::start(
                &path,
                EngineConfig { load: LoadOptions { format: a.model.format() }, scheduler },
            )
        };
        restart = Some(bench::chat_after_restart(start, words)?);
    }
    if a.json {
        let report = serde_json::json!({"single": single, "engine": batches, "structured": structured, "join": join,
            "speculation": speculation, "turn2": turn2, "turn2_draft_cache": turn2_draft_cache, "restart": restart});
        println!("{report}");
        return Ok(());
    }
    println!("model              {}", info.name);
    println!(
        "weights            {:?} (stored: {})",
        info.format,
        info.stored_quantization.as_deref().unwrap_or("float")
    );
    if let Some(single) = single {
        println!("single-stream      prompt {:.1} tok/s ({} tokens), decode {:.1} tok/s ({} tokens), peak {:.0} MB",
            single.prompt_tps, a.prompt_tokens, single.decode_tps, a.gen_tokens, single.peak_memory_bytes as f64 / 1e6);
    }
    for b in &batches {
        println!("engine x{:<2}         aggregate decode {:.1} tok/s, per request {:.1} tok/s, wall {:.1} s, KV cache {:.1} MB",
            b.concurrency, b.aggregate_decode_tps, b.per_request_decode_tps, b.wall_secs, b.peak_kv_cache_bytes as f64 / 1e6);
        println!("                   prompts {}-{} tokens: TTFT mean {:.3} s, last {:.3} s; all tokens {:.1} tok/s",
            b.min_prompt_tokens, b.prompt_tokens, b.ttft_mean_secs, b.ttft_max_secs, b.total_tps);
    }
    for (s, free) in structured.iter().zip(&batches) {
        println!("engine x{:<2} JSON    aggregate decode {:.1} tok/s, per request {:.1} tok/s ({:.2}x free text)",
            s.concurrency, s.aggregate_decode_tps, s.per_request_decode_tps, s.aggregate_decode_tps / free.aggregate_decode_tps);
    }
    for line in speculation.iter().flat_map(speculation_lines::lines) {
        println!("{line}");
    }
    if let Some(j) = join {
        println!("join latency       {:.3} s with {} running: own prefill {:.3} s + {:.2} decode steps ({:.3} s/step)",
            j.join_secs, j.running, j.own_prefill_secs, j.join_steps_beyond_prefill, j.decode_step_secs);
    }
    if let Some((warm, cold)) = turn2 {
        println!("chat turn 2        {} prompt tokens: TTFT {:.3} s with the prefix cache ({} cached), {:.3} s without",
            warm.prompt_tokens, warm.ttft_secs, warm.cached_tokens, cold.ttft_secs);
        if let Some(c) = &turn2_draft_cache {
            println!("  draft cache      {}", speculation_lines::draft_cache(c));
        }
    }
    if let Some(r) = restart {
        println!("after a restart    {} prompt tokens: TTFT {:.3} s from the disk cache ({} tokens read, file {:.1} MB), {:.3} s without ({:.1}x)",
            r.prompt_tokens, r.with_disk.ttft_secs, r.with_disk.cached_tokens, r.file_bytes as f64 / 1e6,
            r.without_disk.ttft_secs, r.without_disk.ttft_secs / r.with_disk.ttft_secs.max(1e-9));
    }
    Ok(())
}
