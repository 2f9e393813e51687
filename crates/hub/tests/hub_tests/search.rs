//! Search and model details against a fake Hub on 127.0.0.1: what the
//! gallery shows (architecture and whether the engine runs it, badges, sizes
//! per quantization, downloads, license, gated state) and the shape the fit
//! check needs.
use crate::common;

use std::path::Path;

use common::{write_gguf, FakeFile, FakeHub, FakeRepo, GgufValue};
use hub::{
    check_fit, EngineSupport, FitLevel, FitSettings, FormatFilter, Gated, HfCache, HubClient,
    HubConfig, HubModel, MachineMemory, SearchQuery, SortBy, Support, VariantFormat, WeightBytes,
};
use serde_json::json;

/// The engine's registry as the app would pass it in.
struct Registry;

impl EngineSupport for Registry {
    fn model_type(&self, model_type: &str) -> Option<Support> {
        match model_type {
            "qwen2_5_vl" => Some(Support { family: "Qwen2-VL".into(), vision: true }),
            "qwen3" => Some(Support { family: "Qwen3".into(), vision: false }),
            _ => None,
        }
    }

    fn gguf_architecture(&self, architecture: &str) -> Option<Support> {
        (architecture == "llama").then(|| Support { family: "Llama".into(), vision: false })
    }
}

const VL: &str = "mlx-community/Qwen2.5-VL-3B-Instruct-4bit";
const QWEN3: &str = "mlx-community/Qwen3-4B-4bit";
const MAMBA: &str = "someone/mamba-130m";
const GGUF: &str = "ggml-org/SmolLM2-135M-GGUF";
const GATED: &str = "meta/Llama-Gated";

fn bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 256) as u8).collect()
}

fn vl_config() -> serde_json::Value {
    json!({
        "model_type": "qwen2_5_vl", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 128, "intermediate_size": 256, "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16", "quantization": {"bits": 4, "group_size": 64},
        "vision_config": {"embed_dim": 64, "num_heads": 4}
    })
}

fn gguf_file(dir: &Path, extra: usize) -> Vec<u8> {
    let path = dir.join("m.gguf");
    write_gguf(
        &path,
        3,
        &[
            ("general.architecture", GgufValue::Str("llama".into())),
            ("llama.block_count", GgufValue::U32(30)),
            ("llama.attention.head_count", GgufValue::U32(9)),
            ("llama.attention.head_count_kv", GgufValue::U32(3)),
            ("llama.embedding_length", GgufValue::U32(576)),
            ("llama.context_length", GgufValue::U32(8192)),
            ("llama.feed_forward_length", GgufValue::U32(1536)),
            ("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5)),
            (
                "tokenizer.ggml.tokens",
                GgufValue::Strings((0..500).map(|i| format!("t{i}")).collect()),
            ),
        ],
    );
    let mut content = std::fs::read(&path).unwrap();
    // the tensors that would follow the header
    content.extend(bytes(extra));
    content
}

async fn fake_hub(dir: &Path) -> FakeHub {
    let hub = FakeHub::start().await;
    let mut vl = FakeRepo::new(vec![
        FakeFile::new("config.json", vl_config().to_string()),
        FakeFile::new("tokenizer.json", br#"{"version": "1.0"}"#.to_vec()),
        FakeFile::lfs("model.safetensors", bytes(50_000)),
    ]);
    vl.info = json!({
        "downloads": 500, "likes": 20, "pipeline_tag": "image-text-to-text",
        "tags": ["mlx", "safetensors", "image-text-to-text", "license:apache-2.0"],
        "config": {"model_type": "qwen2_5_vl",
                   "tokenizer_config": {"chat_template": "{% if tools %}<tool_call>{% endif %}"}},
        "safetensors": {"parameters": {"BF16": 3000000000u64}, "total": 3000000000u64},
        "lastModified": "2026-01-02T00:00:00.000Z"
    });
    hub.add_repo(VL, vl);

    let mut qwen3 = FakeRepo::new(vec![
        FakeFile::new("config.json", json!({"model_type": "qwen3"}).to_string()),
        FakeFile::lfs("model.safetensors", bytes(20_000)),
    ]);
    qwen3.info = json!({
        "downloads": 1000, "likes": 50, "pipeline_tag": "text-generation", "tags": ["mlx"],
        "config": {"model_type": "qwen3", "tokenizer_config": {"chat_template": [
            {"name": "default", "template": "{% if enable_thinking %}<think>{% endif %}"}]}}
    });
    hub.add_repo(QWEN3, qwen3);

    let mut mamba = FakeRepo::new(vec![
        FakeFile::new("config.json", json!({"model_type": "mamba"}).to_string()),
        FakeFile::lfs("model.safetensors", bytes(10_000)),
    ]);
    mamba.info = json!({"downloads": 100, "tags": ["mlx"], "config": {"model_type": "mamba"}});
    hub.add_repo(MAMBA, mamba);

    let mut gguf = FakeRepo::new(vec![
        FakeFile::new("README.md", b"# SmolLM2".to_vec()),
        FakeFile::lfs("smollm2-135m-q4_k_m.gguf", gguf_file(dir, 30_000)),
        FakeFile::lfs("smollm2-135m-q8_0.gguf", gguf_file(dir, 60_000)),
    ]);
    gguf.info = json!({
        "downloads": 300, "likes": 5, "tags": ["gguf", "license:apache-2.0"],
        "gguf": {"architecture": "llama", "context_length": 8192, "chat_template": "{{ messages }}"}
    });
    hub.add_repo(GGUF, gguf);

    let mut gated = FakeRepo::new(vec![
        FakeFile::new("config.json", json!({"model_type": "llama"}).to_string()),
        FakeFile::lfs("model.safetensors", bytes(1000)),
    ]);
    gated.gated = true;
    gated.token = Some("hf_granted".into());
    gated.info = json!({"downloads": 50, "tags": ["mlx"], "cardData": {"license": "llama3.2"},
                        "config": {"model_type": "llama"}});
    hub.add_repo(GATED, gated);
    hub
}

fn client(hub: &FakeHub, cache: &Path) -> HubClient {
    common::no_ambient_token();
    HubClient::new(HubConfig {
        endpoint: Some(hub.endpoint.clone()),
        token: None,
        cache: HfCache::new(cache),
    })
    .unwrap()
}

fn find<'a>(results: &'a [HubModel], repo: &str) -> &'a HubModel {
    results.iter().find(|m| m.repo == repo).unwrap_or_else(|| panic!("no {repo} in {results:#?}"))
}

#[tokio::test]
async fn search_results_say_what_the_engine_runs_and_what_the_hub_knows() {
    let dir = tempfile::tempdir().unwrap();
    let hub = fake_hub(dir.path()).await;
    let client = client(&hub, dir.path());

    let page = client.search(&SearchQuery::default(), &Registry).await.unwrap();
    let order: Vec<&str> = page.results.iter().map(|m| m.repo.as_str()).collect();
    assert_eq!(order, [QWEN3, VL, GGUF, MAMBA, GATED], "by downloads");
    assert!(!page.has_more);
    let asked = hub.requests().into_iter().find(|r| r.path.starts_with("/api/models?")).unwrap();
    for part in ["sort=downloads", "full=true", "config=true", "limit=21"] {
        assert!(asked.path.contains(part), "{}", asked.path);
    }

    let vl = find(&page.results, VL);
    assert_eq!(vl.architecture.as_deref(), Some("qwen2_5_vl"));
    assert!(vl.support.supported && vl.support.reason.is_none());
    assert_eq!(vl.support.family.as_deref(), Some("Qwen2-VL"));
    assert!(
        vl.capabilities.vision && vl.capabilities.tools && !vl.capabilities.thinking,
        "{:?}",
        vl.capabilities
    );
    assert_eq!((vl.downloads, vl.likes), (500, 20));
    assert_eq!(vl.license.as_deref(), Some("apache-2.0"));
    assert_eq!(vl.gated, Gated::No);
    assert_eq!(vl.parameters, Some(3_000_000_000));
    assert_eq!(vl.url, format!("{}/{VL}", hub.endpoint));
    // names without sizes: sizes need a file listing
    assert_eq!(vl.variants.len(), 1);
    assert_eq!((vl.variants[0].label.as_str(), vl.variants[0].bytes), ("safetensors", None));

    let qwen3 = find(&page.results, QWEN3);
    assert!(qwen3.capabilities.thinking && !qwen3.capabilities.vision, "{:?}", qwen3.capabilities);

    // an architecture the engine lacks is shown, marked unsupported, with the reason
    let mamba = find(&page.results, MAMBA);
    assert_eq!(mamba.architecture.as_deref(), Some("mamba"));
    assert!(!mamba.support.supported && mamba.support.family.is_none());
    assert!(mamba.support.reason.as_deref().unwrap().contains("mamba"), "{:?}", mamba.support);

    let gguf = find(&page.results, GGUF);
    assert_eq!(gguf.architecture.as_deref(), Some("llama"));
    assert_eq!(gguf.support.family.as_deref(), Some("Llama"));
    let labels: Vec<&str> = gguf.variants.iter().map(|v| v.label.as_str()).collect();
    assert_eq!(labels, ["Q4_K_M", "Q8_0"]);

    let gated = find(&page.results, GATED);
    assert_eq!(gated.gated, Gated::Auto);
    assert_eq!(gated.license.as_deref(), Some("llama3.2"));
    assert!(!gated.support.supported, "llama is not in this test's registry");
}

#[tokio::test]
async fn search_filters_pages_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let hub = fake_hub(dir.path()).await;
    let client = client(&hub, dir.path());

    let text = SearchQuery { text: Some("qwen".into()), ..SearchQuery::default() };
    let page = client.search(&text, &Registry).await.unwrap();
    assert_eq!(page.results.iter().map(|m| m.repo.as_str()).collect::<Vec<_>>(), [QWEN3, VL]);

    let first = SearchQuery { limit: 2, sort: SortBy::Likes, ..SearchQuery::default() };
    let page = client.search(&first, &Registry).await.unwrap();
    assert_eq!(page.results.iter().map(|m| m.repo.as_str()).collect::<Vec<_>>(), [QWEN3, VL]);
    assert!(page.has_more);

    let gguf_only = SearchQuery { format: FormatFilter::Gguf, ..SearchQuery::default() };
    let page = client.search(&gguf_only, &Registry).await.unwrap();
    assert_eq!(page.results.iter().map(|m| m.repo.as_str()).collect::<Vec<_>>(), [GGUF]);
    let vision = SearchQuery {
        vision_only: true,
        author: Some("mlx-community".into()),
        ..SearchQuery::default()
    };
    let page = client.search(&vision, &Registry).await.unwrap();
    assert_eq!(page.results.iter().map(|m| m.repo.as_str()).collect::<Vec<_>>(), [VL]);

    // with the file listings: the size on disk of each quantization
    let sized =
        SearchQuery { format: FormatFilter::Gguf, file_sizes: true, ..SearchQuery::default() };
    let page = client.search(&sized, &Registry).await.unwrap();
    let gguf = &page.results[0];
    let q4 = gguf.variants.iter().find(|v| v.label == "Q4_K_M").unwrap();
    let q8 = gguf.variants.iter().find(|v| v.label == "Q8_0").unwrap();
    assert_eq!(q4.files, ["smollm2-135m-q4_k_m.gguf"]);
    assert_eq!(q8.bytes.unwrap() - q4.bytes.unwrap(), 30_000);
    assert_eq!(q4.format, VariantFormat::Gguf);
}

#[tokio::test]
async fn details_give_sizes_and_the_shape_for_the_fit_check() {
    let dir = tempfile::tempdir().unwrap();
    let hub = fake_hub(dir.path()).await;
    let client = client(&hub, dir.path());

    let details = client.model_details(VL, "main", &Registry).await.unwrap();
    assert_eq!(details.commit, "c0ffee0000000000000000000000000000000001");
    let variant = &details.model.variants[0];
    assert_eq!(variant.label, "4-bit");
    assert_eq!(variant.weight_bytes, Some(50_000));
    let config_len = vl_config().to_string().len() as u64;
    assert_eq!(variant.bytes, Some(50_000 + config_len + br#"{"version": "1.0"}"#.len() as u64));
    let shape = details.shape.as_ref().expect("shape from config.json");
    assert_eq!(
        (shape.layers.len(), shape.layers[0].kv_heads, shape.layers[0].head_dim, shape.max_context),
        (4, 2, 32, Some(4096))
    );
    assert!(shape.vision.is_some());

    // the fit check from what the details hold
    let weights = WeightBytes { weights: variant.weight_bytes.unwrap(), vision_projector: 0 };
    let settings = FitSettings { context: 4096, kv_bits: None, sequences: 1 };
    let machine =
        MachineMemory { total_bytes: 8 << 30, available_bytes: 4 << 30, gpu_limit_bytes: None };
    let report = check_fit(shape, &weights, &settings, &machine);
    assert_eq!(report.level, FitLevel::Green);
    assert_eq!(report.estimate.kv_cache, 2 * 4 * 2 * 32 * 2 * 4096);
    assert_eq!(report.max_green_context, Some(4096));

    // a GGUF repo: the shape from the first bytes of its file
    let details = client.model_details(GGUF, "main", &Registry).await.unwrap();
    let shape = details.shape.as_ref().unwrap_or_else(|| panic!("{:?}", details.shape_error));
    assert_eq!(
        (shape.layers.len(), shape.layers[0].kv_heads, shape.layers[0].head_dim, shape.vocab_size),
        (30, 3, 64, 500)
    );
    let ranged = hub.file_requests("smollm2-135m-q4_k_m.gguf");
    assert_eq!(ranged.len(), 1, "{ranged:?}");
    assert!(ranged[0].range.as_deref().unwrap().starts_with("bytes=0-"), "{ranged:?}");

    let err = client.model_details("nobody/nothing", "main", &Registry).await.unwrap_err();
    assert_eq!(err.code(), "NOT_FOUND", "{err}");
    let err = client.model_details("../evil", "main", &Registry).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_REPO_ID");
}

/// A checkpoint whose config names multi-token-prediction layers is marked
/// as shipping MTP heads; its MLX conversion, which keeps the config but
/// drops the `mtp.*` tensors, is not.
#[tokio::test]
async fn search_marks_checkpoints_that_ship_mtp_heads() {
    let dir = tempfile::tempdir().unwrap();
    let hub = FakeHub::start().await;
    let config = json!({"model_type": "qwen3", "text_config": {"mtp_num_hidden_layers": 1}});
    for (repo, tags) in [
        ("Qwen/Qwen3.5-MTP", json!(["transformers", "safetensors"])),
        ("mlx-community/Qwen3.5-MTP-4bit", json!(["mlx", "safetensors"])),
        ("someone/plain", json!(["transformers"])),
    ] {
        let mut fake = FakeRepo::new(vec![
            FakeFile::new("config.json", config.to_string()),
            FakeFile::lfs("model.safetensors", bytes(1_000)),
        ]);
        let summary =
            if repo == "someone/plain" { json!({"model_type": "qwen3"}) } else { config.clone() };
        fake.info = json!({"tags": tags, "config": summary});
        hub.add_repo(repo, fake);
    }
    let client = client(&hub, dir.path());
    let page = client.search(&SearchQuery::default(), &Registry).await.unwrap();
    let mtp = |repo: &str| find(&page.results, repo).capabilities.mtp;
    assert!(mtp("Qwen/Qwen3.5-MTP"));
    assert!(!mtp("mlx-community/Qwen3.5-MTP-4bit"), "an MLX conversion drops the heads");
    assert!(!mtp("someone/plain"));
}
