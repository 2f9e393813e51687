//! The config.json of released checkpoints, as far as the engine's
//! families and the hub's fit check read them: one copy for the tests of
//! both.
use serde_json::{json, Value};

/// LFM2-VL-1.6B's config.json (LiquidAI/LFM2-VL-1.6B, the fields the model
/// and the fit check read): LFM2-1.2B's text model, a SigLIP2 NaFlex tower,
/// and the processor's tile and token sizes at the top.
pub fn lfm2_vl_1_6b_config() -> Value {
    json!({
        "model_type": "lfm2-vl", "architectures": ["Lfm2VlForConditionalGeneration"],
        "downsample_factor": 2, "encoder_patch_size": 16, "image_token_index": 396,
        "projector_bias": true, "projector_hidden_act": "gelu", "projector_hidden_size": 2560,
        "vision_feature_layer": -1, "tile_size": 512, "max_image_tokens": 256,
        "text_config": {
            "model_type": "lfm2", "block_auto_adjust_ff_dim": true, "block_dim": 2048,
            "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256,
            "conv_L_cache": 3, "conv_bias": false, "hidden_size": 2048,
            "full_attn_idxs": [2, 5, 8, 10, 12, 14], "max_position_embeddings": 128000,
            "norm_eps": 1e-5, "num_attention_heads": 32, "num_hidden_layers": 16,
            "num_key_value_heads": 8, "rope_theta": 1000000.0, "vocab_size": 65536
        },
        "vision_config": {
            "model_type": "siglip2_vision_model", "hidden_size": 1152,
            "intermediate_size": 4304, "layer_norm_eps": 1e-6, "num_attention_heads": 16,
            "num_channels": 3, "num_hidden_layers": 26, "num_patches": 256, "patch_size": 16
        }
    })
}

/// Ministral 3 3B's `text_config` (mistralai/Ministral-3-3B-Instruct-2512,
/// the fields the model reads).
pub fn ministral3_3b_text_config() -> Value {
    json!({
        "model_type": "ministral3", "hidden_size": 3072, "intermediate_size": 9216,
        "head_dim": 128, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 26, "vocab_size": 131072, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 262144, "sliding_window": null,
        "tie_word_embeddings": true,
        "rope_parameters": {"rope_type": "yarn", "type": "yarn", "rope_theta": 1000000.0,
            "factor": 16.0, "original_max_position_embeddings": 16384, "beta_fast": 32.0,
            "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1}
    })
}
