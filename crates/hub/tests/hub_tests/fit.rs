//! The fit check of models on disk: the default GGUF model and a folder in
//! the Hugging Face cache layout.

use std::path::Path;

use fixtures::{lfm2_vl_1_6b_config, ministral3_3b_text_config};
use hub::fit::{local_model, VisionShape, RUNTIME_OVERHEAD_BYTES};
use hub::{check_local_model, FitLevel, FitSettings, MachineMemory, ModelShape, WeightHolding};
use serde_json::{json, Value};

fn default_model() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[test]
fn the_default_model_s_shape_comes_from_its_gguf_header() {
    let path = default_model();
    assert!(path.is_file(), "{} is missing: run scripts/setup.sh", path.display());
    let (shape, weights) = local_model(&path, WeightHolding::AsStored).unwrap();
    // SmolLM2-135M: 30 layers, 9 heads of 64, 3 KV heads, 8192 tokens
    assert_eq!(
        (shape.layers.len(), shape.layers[0].kv_heads, shape.layers[0].head_dim),
        (30, 3, 64)
    );
    assert_eq!((shape.hidden_size, shape.max_context, shape.vocab_size), (576, Some(8192), 49152));
    assert_eq!(weights.weights, std::fs::metadata(&path).unwrap().len());
    assert_eq!(weights.vision_projector, 0);
    // dequantized to float32 (the engine's default on the CPU): 4 bytes for each
    // of its 134.5 million weights (the tensor table of the file)
    let (_, float) = local_model(&path, WeightHolding::Float32).unwrap();
    assert!((134_000_000 * 4..135_000_000 * 4).contains(&float.weights), "{}", float.weights);

    let settings = FitSettings { context: 8192, kv_bits: None, sequences: 1 };
    let report =
        check_local_model(&path, WeightHolding::AsStored, &settings, &MachineMemory::detect())
            .unwrap();
    // 30 × 2 × 3 × 64 × bytes of the engine's activation type per token
    // (float32, but float16 on Metal with the weights as stored)
    let element = if cfg!(target_os = "macos") { 2 } else { 4 };
    assert_eq!(report.estimate.kv_cache, 11_520 * element * 8192);
    assert_ne!(report.level, FitLevel::Red, "{}", report.summary);
    println!("default model at 8192 tokens: {}", report.summary);
}

#[test]
fn a_cached_folder_counts_its_safetensors_through_the_snapshot_links() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = dir.path().join("blobs");
    let snapshot = dir.path().join("snapshots/abc");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    let config = br#"{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
        "hidden_size": 64, "intermediate_size": 128, "rms_norm_eps": 1e-5, "vocab_size": 100,
        "max_position_embeddings": 512}"#;
    for (name, content) in [
        ("config.json", config.to_vec()),
        ("model-00001-of-00002.safetensors", vec![1u8; 3000]),
        ("model-00002-of-00002.safetensors", vec![2u8; 2000]),
        ("tokenizer.json", vec![b' '; 500]),
    ] {
        std::fs::write(blobs.join(name), content).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{name}"), snapshot.join(name)).unwrap();
    }
    let (shape, weights) = local_model(&snapshot, WeightHolding::AsStored).unwrap();
    assert_eq!(weights.weights, 5000);
    assert_eq!(
        (shape.layers.len(), shape.layers[0].kv_heads, shape.layers[0].head_dim),
        (2, 2, 32)
    );
    // these are not real safetensors: their weights cannot be counted, so the stored size stands
    assert_eq!(local_model(&snapshot, WeightHolding::Float32).unwrap().1.weights, 5000);

    std::fs::write(blobs.join("config.json"), b"{}").unwrap();
    let err = local_model(&snapshot, WeightHolding::AsStored).unwrap_err();
    assert_eq!(err.code(), "INVALID_MODEL_CONFIG", "{err}");
    assert!(err.to_string().contains("neither model_type nor architectures"), "{err}");
}

/// An MLX 4-bit checkpoint: packed U32 words count 8 weights each; scales and
/// biases are not weights.
#[test]
fn mlx_quantized_safetensors_count_their_packed_weights() {
    let dir = tempfile::tempdir().unwrap();
    let config = br#"{"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2,
        "hidden_size": 64, "intermediate_size": 128, "rms_norm_eps": 1e-5, "vocab_size": 100,
        "quantization": {"bits": 4, "group_size": 64}}"#;
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    let header = serde_json::json!({
        "__metadata__": {"format": "mlx"},
        "layers.0.mlp.weight": {"dtype": "U32", "shape": [128, 8], "data_offsets": [0, 4096]},
        "layers.0.mlp.scales": {"dtype": "BF16", "shape": [128, 1], "data_offsets": [4096, 4352]},
        "layers.0.mlp.biases": {"dtype": "BF16", "shape": [128, 1], "data_offsets": [4352, 4608]},
        "norm.weight": {"dtype": "BF16", "shape": [64], "data_offsets": [4608, 4736]}
    })
    .to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend(vec![0u8; 4736]);
    std::fs::write(dir.path().join("model.safetensors"), &file).unwrap();
    let (_, stored) = local_model(dir.path(), WeightHolding::AsStored).unwrap();
    assert_eq!(stored.weights, file.len() as u64);
    let (_, float) = local_model(dir.path(), WeightHolding::Float32).unwrap();
    assert_eq!(float.weights, (128 * 8 * 8 + 64) * 4);
}

/// LFM2-1.2B (mlx-community/LFM2-1.2B-4bit in the catalog): ten short
/// convolutions keep their last two inputs (2 × 2048 values) whatever the
/// context, only the six attention layers' keys and values grow; with the
/// catalog's size its chat fits an 8 GB machine with 5 GB free.
#[test]
fn an_lfm2_estimate_counts_only_its_attention_layers_per_token() {
    let config = serde_json::json!({
        "model_type": "lfm2", "block_auto_adjust_ff_dim": true, "block_dim": 2048,
        "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256,
        "conv_L_cache": 3, "conv_bias": false, "hidden_size": 2048,
        "full_attn_idxs": [2, 5, 8, 10, 12, 14], "max_position_embeddings": 128000,
        "norm_eps": 1e-5, "num_attention_heads": 32, "num_hidden_layers": 16,
        "num_key_value_heads": 8, "rope_theta": 1000000.0, "vocab_size": 65536,
        "torch_dtype": "bfloat16"
    });
    let shape = ModelShape::from_config(&config).unwrap();
    assert_eq!(shape.layers.len(), 16);
    let attention: Vec<usize> = (0..16).filter(|&i| shape.layers[i].kv_heads > 0).collect();
    assert_eq!(attention, [2, 5, 8, 10, 12, 14]);
    assert!(attention.iter().all(|&i| shape.layers[i].head_dim == 64));
    // KV quantization: every attention layer (the last layer is a convolution)
    assert!(shape.layers.iter().enumerate().all(|(i, l)| l.quantizable == attention.contains(&i)));
    let states = 10 * 2 * 2048 * 2; // bf16
    let per_token = 6 * 2 * 8 * 64 * 2;
    assert_eq!(shape.kv_bytes(1000, None), states + per_token * 1000);
    assert_eq!(shape.kv_bytes(4000, None) - shape.kv_bytes(1000, None), per_token * 3000);

    let entry = catalog_entry("mlx-community/LFM2-1.2B-4bit");
    assert_eq!((entry.architecture.as_str(), entry.vision), ("lfm2", false));
    let settings = FitSettings { context: 32_768, kv_bits: None, sequences: 4 };
    let report = on_8_gb_with_5_free(&shape, &entry, settings);
    assert_eq!(report.level, FitLevel::Green, "{}", report.summary);
    assert_eq!(report.estimate.weights, entry.size_bytes);
}

fn catalog_entry(id: &str) -> hub::CatalogEntry {
    let catalog = hub::Catalog::builtin().unwrap();
    catalog.models.into_iter().find(|m| m.id == id).unwrap_or_else(|| panic!("{id} in the catalog"))
}

/// Each of `ids` is in the catalog as its family, with vision and thinking
/// as `expected` says.
fn assert_listed(ids: &[&str], expected: (&str, bool, bool)) {
    for id in ids {
        let entry = catalog_entry(id);
        let listed = (entry.architecture.as_str(), entry.vision, entry.thinking);
        assert_eq!(listed, expected, "{id}");
    }
}

/// The fit of a catalog model (its listed size as the weights) on an 8 GB
/// machine with 5 GB free.
fn on_8_gb_with_5_free(
    shape: &ModelShape,
    entry: &hub::CatalogEntry,
    settings: FitSettings,
) -> hub::FitReport {
    let weights = hub::WeightBytes { weights: entry.size_bytes, vision_projector: 0 };
    let gib = 1u64 << 30;
    let machine =
        MachineMemory { total_bytes: 8 * gib, available_bytes: 5 * gib, gpu_limit_bytes: None };
    let report = hub::check_fit(shape, &weights, &settings, &machine);
    println!("{} on 8 GB: {}", entry.id, report.summary);
    report
}

/// gpt-oss-20b (mlx-community/gpt-oss-20b-MXFP4-Q8 in the catalog): its
/// twelve sliding layers keep a window of 128 tokens whatever the context,
/// only the twelve full layers' keys and values grow; KV quantization
/// applies to the full layers but the last.
#[test]
fn a_gpt_oss_estimate_grows_only_with_its_full_layers() {
    let types: Vec<&str> =
        (0..24).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    let config = serde_json::json!({
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 24,
        "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
        "rms_norm_eps": 1e-05, "sliding_window": 128, "rope_theta": 150000,
        "max_position_embeddings": 131072, "layer_types": types, "torch_dtype": "bfloat16",
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn"}
    });
    let shape = ModelShape::from_config(&config).unwrap();
    assert_eq!(shape.layers.len(), 24);
    assert!(shape.layers.iter().all(|l| (l.kv_heads, l.head_dim) == (8, 64)));
    let sliding: Vec<usize> = (0..24).filter(|&i| shape.layers[i].window == Some(128)).collect();
    assert_eq!(sliding, (0..24).step_by(2).collect::<Vec<_>>());
    let quantizable: Vec<usize> = (0..24).filter(|&i| shape.layers[i].quantizable).collect();
    assert_eq!(quantizable, (1..23).step_by(2).collect::<Vec<_>>());
    let per_token = 12 * 2 * 8 * 64 * 2; // full layers, bf16
    assert_eq!(shape.kv_bytes(8000, None) - shape.kv_bytes(4000, None), per_token * 4000);

    let entry = catalog_entry("mlx-community/gpt-oss-20b-MXFP4-Q8");
    assert_eq!(
        (entry.architecture.as_str(), entry.vision, entry.thinking),
        ("gpt_oss", false, true)
    );
}

/// gpt-oss-20b as llama.cpp exports it (`gpt-oss.*` keys: experts, the
/// sliding window, YaRN under `rope.scaling.*`; the layer pattern is not in
/// the file): the shape read from its GGUF header is the one its
/// config.json gives — the same sliding and full layers, heads, vocabulary
/// and context.
#[test]
fn a_gpt_oss_gguf_header_has_the_shape_of_its_config() {
    use crate::common::{write_gguf, GgufValue};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt-oss-20b-mxfp4.gguf");
    let vocab: Vec<String> = (0..201_088).map(|i| format!("t{i}")).collect();
    write_gguf(
        &path,
        3,
        &[
            ("general.architecture", GgufValue::Str("gpt-oss".into())),
            ("gpt-oss.block_count", GgufValue::U32(24)),
            ("gpt-oss.context_length", GgufValue::U32(131_072)),
            ("gpt-oss.embedding_length", GgufValue::U32(2880)),
            ("gpt-oss.feed_forward_length", GgufValue::U32(2880)),
            ("gpt-oss.expert_feed_forward_length", GgufValue::U32(2880)),
            ("gpt-oss.expert_count", GgufValue::U32(32)),
            ("gpt-oss.expert_used_count", GgufValue::U32(4)),
            ("gpt-oss.attention.head_count", GgufValue::U32(64)),
            ("gpt-oss.attention.head_count_kv", GgufValue::U32(8)),
            ("gpt-oss.attention.key_length", GgufValue::U32(64)),
            ("gpt-oss.attention.value_length", GgufValue::U32(64)),
            ("gpt-oss.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5)),
            ("gpt-oss.attention.sliding_window", GgufValue::U32(128)),
            ("gpt-oss.rope.freq_base", GgufValue::F32(150_000.0)),
            ("gpt-oss.rope.scaling.type", GgufValue::Str("yarn".into())),
            ("gpt-oss.rope.scaling.factor", GgufValue::F32(32.0)),
            ("gpt-oss.rope.scaling.original_context_length", GgufValue::U32(4096)),
            ("tokenizer.ggml.model", GgufValue::Str("gpt2".into())),
            ("tokenizer.ggml.tokens", GgufValue::Strings(vocab)),
        ],
    );
    let (from_gguf, _) = local_model(&path, WeightHolding::AsStored).unwrap();
    let types: Vec<&str> =
        (0..24).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    let config = serde_json::json!({
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 24,
        "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
        "rms_norm_eps": 1e-05, "sliding_window": 128, "rope_theta": 150000,
        "max_position_embeddings": 131072, "layer_types": types,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn"}
    });
    let mut from_config = ModelShape::from_config(&config).unwrap();
    from_config.kv_element_bytes = from_gguf.kv_element_bytes;
    assert_eq!(from_gguf, from_config);
    assert_eq!(from_gguf.layers.iter().filter(|l| l.window == Some(128)).count(), 12);
}

/// LFM2-VL-1.6B (mlx-community/LFM2-VL-1.6B-4bit in the catalog): its text
/// model is LFM2-1.2B's — ten short convolutions keep a fixed state, only
/// the six attention layers grow per token — read from `text_config`, and
/// its SigLIP2 tower (1152 wide, 16 heads) counts for an image (its views:
/// see `tiling_families_count_every_view_of_an_image`); the 4-bit
/// checkpoint's chat fits an 8 GB machine with 5 GB free.
#[test]
fn an_lfm2_vl_estimate_reads_its_text_config_and_tower() {
    let config = lfm2_vl_1_6b_config();
    let shape = ModelShape::from_config(&config).unwrap();
    assert_eq!(shape.layers.len(), 16);
    let attention: Vec<usize> = (0..16).filter(|&i| shape.layers[i].kv_heads > 0).collect();
    assert_eq!(attention, [2, 5, 8, 10, 12, 14]);
    assert_eq!((shape.hidden_size, shape.vocab_size), (2048, 65536));
    let vision = shape.vision.as_ref().expect("the tower counts");
    assert_eq!((vision.hidden_size, vision.heads), (1152, 16));
    let states = 10 * 2 * 2048 * 2; // bf16
    let per_token = 6 * 2 * 8 * 64 * 2;
    assert_eq!(shape.kv_bytes(1000, None), states + per_token * 1000);

    let ids = ["mlx-community/LFM2-VL-450M-4bit", "mlx-community/LFM2-VL-1.6B-4bit"];
    assert_listed(&ids, ("lfm2_vl", true, false));
    let entry = catalog_entry("mlx-community/LFM2-VL-1.6B-4bit");
    let settings = FitSettings { context: 32_768, kv_bits: None, sequences: 4 };
    let report = on_8_gb_with_5_free(&shape, &entry, settings);
    assert_eq!(report.level, FitLevel::Green, "{}", report.summary);
}

/// Ministral 3 3B (mlx-community/Ministral-3-3B-Instruct-2512-4bit in the
/// catalog): its text model from `text_config` (26 layers attending fully,
/// 8 KV heads of 128, whatever the YaRN context) and its Pixtral tower (1024
/// wide, 16 heads) counting for an image; the 4-bit checkpoint's chat at 8K
/// fits an 8 GB machine with 5 GB free.
#[test]
fn a_ministral3_estimate_reads_its_text_config_and_tower() {
    let config = serde_json::json!({
        "model_type": "mistral3", "image_token_index": 10, "spatial_merge_size": 2,
        "multimodal_projector_bias": false, "projector_hidden_act": "gelu",
        "vision_feature_layer": -1,
        "text_config": ministral3_3b_text_config(),
        "vision_config": {
            "model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096,
            "num_attention_heads": 16, "num_hidden_layers": 24, "head_dim": 64,
            "patch_size": 14, "image_size": 1540, "rope_theta": 10000.0
        },
        "torch_dtype": "bfloat16"
    });
    let shape = ModelShape::from_config(&config).unwrap();
    assert_eq!(shape.layers.len(), 26);
    assert!(shape.layers.iter().all(|l| (l.kv_heads, l.head_dim, l.window) == (8, 128, None)));
    assert_eq!((shape.hidden_size, shape.vocab_size), (3072, 131072));
    // Pixtral encodes an image as one view
    assert_eq!(shape.vision, Some(VisionShape::one_view(1024, 16)));
    let per_token = 26 * 2 * 8 * 128 * 2; // bf16
    assert_eq!(shape.kv_bytes(2000, None) - shape.kv_bytes(1000, None), per_token * 1000);

    let ids = [
        "mlx-community/Ministral-3-3B-Instruct-2512-4bit",
        "mlx-community/Ministral-3-14B-Instruct-2512-4bit",
    ];
    assert_listed(&ids, ("mistral3", true, false));
    let entry = catalog_entry("mlx-community/Ministral-3-3B-Instruct-2512-4bit");
    let settings = FitSettings { context: 8192, kv_bits: None, sequences: 1 };
    let report = on_8_gb_with_5_free(&shape, &entry, settings);
    assert_eq!(report.level, FitLevel::Green, "{}", report.summary);
}

/// LFM2-VL and SmolVLM cut a large image into tiles and add a whole-image
/// view (LFM2-VL's thumbnail, SmolVLM's global view), and their towers
/// encode all the views of an image together: the estimate counts the most
/// views one image becomes and the patches of each, as config.json says
/// (all the gallery reads) and as a checkpoint's processor files say. The
/// views and patches here are worked out from the configs, not read back
/// from the code.
#[test]
fn tiling_families_count_every_view_of_an_image() {
    let bf16 = 2;
    // LFM2-VL-1.6B: a 512-pixel tile of 16-pixel patches is 32 × 32 = 1024
    // patches; the thumbnail (or a small image's one view) at most 256
    // tokens of 2 × 2 patches, 1024 too; mlx-vlm cuts up to 10 tiles and
    // adds the thumbnail: 11 views
    let lfm2_vl = ModelShape::from_config(&lfm2_vl_1_6b_config()).unwrap();
    let vision = lfm2_vl.vision.clone().unwrap();
    assert_eq!((vision.hidden_size, vision.heads), (1152, 16));
    assert_eq!((vision.views, vision.patches_per_view), (11, 1024));
    let one = VisionShape::one_view(1152, 16);
    let image = vision.image_activation_bytes(bf16);
    assert_eq!(image, 11 * one.image_activation_bytes(bf16));
    let more = image - one.image_activation_bytes(bf16);
    println!("LFM2-VL-1.6B: one image's views take {image} bytes, {more} more than one view");
    assert!(more > 800 << 20, "{more}");
    // the estimate holds them: at 2048 tokens an image outweighs a prefill chunk
    let weights = hub::WeightBytes { weights: 1 << 30, vision_projector: 0 };
    let settings = FitSettings { context: 2048, kv_bits: None, sequences: 1 };
    let machine =
        MachineMemory { total_bytes: 16 << 30, available_bytes: 8 << 30, gpu_limit_bytes: None };
    let report = hub::check_fit(&lfm2_vl, &weights, &settings, &machine);
    assert_eq!(
        report.estimate.overhead,
        RUNTIME_OVERHEAD_BYTES + image + lfm2_vl.kv_step_bytes(None),
        "{:?}",
        report.estimate
    );
    let single = ModelShape { vision: Some(one), ..lfm2_vl.clone() };
    let single = hub::check_fit(&single, &weights, &settings, &machine);
    assert!(report.estimate.total >= single.estimate.total + more / 2, "{:?}", single.estimate);

    // SmolVLM2-256M: its config.json repeats the processor's sizes in
    // `vision_config`: the first resize to a 2048-pixel longest edge, 512-pixel
    // tiles of 16-pixel patches (32 × 32 = 1024 each): up to 4 × 4 tiles and
    // the global view, 17 views
    let smolvlm = json!({
        "model_type": "smolvlm", "scale_factor": 4, "image_token_id": 49190,
        "text_config": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
            "num_attention_heads": 9, "num_key_value_heads": 3, "num_hidden_layers": 30,
            "rms_norm_eps": 1e-5, "vocab_size": 49280, "max_position_embeddings": 8192},
        "vision_config": {"model_type": "smolvlm_vision", "hidden_size": 768,
            "num_attention_heads": 12, "image_size": 512, "patch_size": 16,
            "size": {"longest_edge": 2048}, "max_image_size": {"longest_edge": 512}},
        "torch_dtype": "bfloat16"
    });
    let vision = ModelShape::from_config(&smolvlm).unwrap().vision.unwrap();
    assert_eq!((vision.views, vision.patches_per_view), (17, 1024));
    let one = VisionShape::one_view(768, 12);
    assert_eq!(vision.image_activation_bytes(bf16), 17 * one.image_activation_bytes(bf16));

    // on disk, the processor files say: a 1536-pixel longest edge makes at
    // most 3 × 3 tiles and the global view; no splitting, the global view alone
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, value: Value| {
        std::fs::write(dir.path().join(name), value.to_string()).unwrap();
    };
    write("config.json", smolvlm.clone());
    // 1024 patches shuffled by 4 a side: 8 × 8 tokens a tile
    write("processor_config.json", json!({"image_seq_len": 64}));
    let mut preprocessor = json!({"size": {"longest_edge": 1536},
        "max_image_size": {"longest_edge": 512}, "do_image_splitting": true});
    write("preprocessor_config.json", preprocessor.clone());
    let views = |dir: &Path| {
        let vision = local_model(dir, WeightHolding::AsStored).unwrap().0.vision.unwrap();
        (vision.views, vision.patches_per_view)
    };
    assert_eq!(views(dir.path()), (10, 1024));
    preprocessor["do_image_splitting"] = json!(false);
    write("preprocessor_config.json", preprocessor);
    assert_eq!(views(dir.path()), (1, 1024));

    // LFM2-VL on disk: 256-pixel tiles are 16 × 16 = 256 patches, and a
    // thumbnail of at most 64 tokens 256 too
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), lfm2_vl_1_6b_config().to_string()).unwrap();
    let small = json!({"tile_size": 256, "max_image_tokens": 64, "min_image_tokens": 16});
    std::fs::write(dir.path().join("preprocessor_config.json"), small.to_string()).unwrap();
    assert_eq!(views(dir.path()), (11, 256));
}
