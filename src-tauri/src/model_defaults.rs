//! Answer defaults a model comes with, under the user's own settings. The
//! built-in model is small (SmolLM2 360M): left to Settings' 1,024 tokens it
//! could go on for minutes repeating itself ("It is the largest of all…"),
//! so it answers at most [`BUILT_IN_MAX_TOKENS`] unless the user chose
//! another limit, as LM Studio ships small models with short limits. (The
//! repetition penalty, 1.1 as in LM Studio, is Settings' own default: it
//! suits every model.)
//!
//! "Chose" means Settings' value is not the app's default: the settings are
//! stored whole, so a limit equal to the default cannot be told from one
//! never touched. A chat's own limit (chat_settings.rs) wins over both.
use crate::settings::Settings;

/// The built-in model's answer limit where the user set none.
pub const BUILT_IN_MAX_TOKENS: usize = 512;

/// The settings a reply of `model_id` uses: `settings` with the model's
/// defaults where the user left the app's.
pub fn for_model(settings: &Settings, model_id: &str, built_in_id: &str) -> Settings {
    let mut used = settings.clone();
    if model_id == built_in_id && settings.max_tokens == Settings::default().max_tokens {
        used.max_tokens = BUILT_IN_MAX_TOKENS;
    }
    used
}

/// Settings' note on what the loaded model does differently, or `None`.
pub fn note(
    settings: &Settings,
    model_id: &str,
    model_name: &str,
    built_in_id: &str,
) -> Option<String> {
    let used = for_model(settings, model_id, built_in_id);
    (used.max_tokens != settings.max_tokens).then(|| {
        format!(
            "{model_name} answers at most {} tokens (its own default, so a small model does not ramble on); \
             set Max tokens to another value to use yours.",
            used.max_tokens
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILT_IN: &str = "dir:SmolLM2-135M-Instruct-Q4_1.gguf";

    #[test]
    fn the_built_in_model_answers_shorter_unless_the_user_chose_a_limit() {
        let defaults = Settings::default();
        assert_eq!(for_model(&defaults, BUILT_IN, BUILT_IN).max_tokens, BUILT_IN_MAX_TOKENS);
        // any other model keeps Settings' limit
        assert_eq!(
            for_model(&defaults, "hf:Qwen/Qwen3-VL-2B", BUILT_IN).max_tokens,
            defaults.max_tokens
        );
        // the user's own limit wins, shorter or longer
        for chosen in [200, 4096] {
            let mine = Settings { max_tokens: chosen, ..Default::default() };
            assert_eq!(for_model(&mine, BUILT_IN, BUILT_IN).max_tokens, chosen);
        }
        // and nothing else changes
        let used = for_model(&defaults, BUILT_IN, BUILT_IN);
        assert_eq!(Settings { max_tokens: defaults.max_tokens, ..used }, defaults);
    }

    #[test]
    fn settings_say_so_for_the_loaded_built_in_model_only() {
        let defaults = Settings::default();
        let n = note(&defaults, BUILT_IN, "SmolLM2 135M", BUILT_IN).unwrap();
        assert!(n.starts_with("SmolLM2 135M answers at most 512 tokens"), "{n}");
        assert_eq!(note(&defaults, "dir:other", "Other", BUILT_IN), None);
        assert_eq!(
            note(
                &Settings { max_tokens: 300, ..Default::default() },
                BUILT_IN,
                "SmolLM2",
                BUILT_IN
            ),
            None
        );
    }

    #[test]
    fn the_repetition_penalty_defaults_to_lm_studios() {
        assert_eq!(Settings::default().repetition_penalty, 1.1);
        assert_eq!(Settings::default().sampling().repetition_penalty, 1.1);
    }
}
