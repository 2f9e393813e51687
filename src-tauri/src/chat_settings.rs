//! What one chat sets for itself: system prompt, model, thinking, sampling,
//! answer length and context policy. Every field left unset follows the
//! app's settings, so changing a global default still reaches every chat
//! that did not choose otherwise. Stored as JSON on the chat (the store keeps
//! it as given); presets are named copies of it.
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::context::ContextPolicy;
use crate::error::{AppError, AppResult};
use crate::settings::Settings;

/// Stored without its unset fields, so the JSON says only what the chat chose.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
#[serde(default, deny_unknown_fields)]
// every field may be left out (in both directions): `field?: T` for the UI
#[ts(optional_fields)]
pub struct ChatSettings {
    /// Replaces the app's system prompt; `Some("")` sends none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The gallery id of the model that answers this chat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<bool>,
    /// Most reasoning tokens before thinking is closed; 0 = no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// What happens when the conversation outgrows the model's context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_policy: Option<ContextPolicy>,
    /// The MCP tools this chat offers its model; unset: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<ChatTools>,
}

/// Which MCP tools a chat offers. A server added later is off in every
/// chat until the chat turns it on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(default, deny_unknown_fields)]
pub struct ChatTools {
    /// The servers whose tools are offered.
    pub servers: Vec<String>,
    /// Tools of those servers left out, as `server/tool`.
    pub disabled: Vec<String>,
    /// The first answer of each turn must be a tool call (a grammar in the
    /// model's own tool-call format makes it one); the answers after the
    /// results choose freely.
    pub require_call: bool,
}

impl ChatSettings {
    /// The settings a reply in this chat runs with: the chat's own over the app's.
    pub fn over(&self, global: &Settings) -> Settings {
        let mut s = global.clone();
        if let Some(v) = &self.system_prompt {
            s.system_prompt = v.clone();
        }
        s.thinking = self.thinking.unwrap_or(s.thinking);
        s.thinking_budget = self.thinking_budget.unwrap_or(s.thinking_budget);
        s.temperature = self.temperature.unwrap_or(s.temperature);
        s.top_p = self.top_p.unwrap_or(s.top_p);
        s.top_k = self.top_k.unwrap_or(s.top_k);
        s.min_p = self.min_p.unwrap_or(s.min_p);
        s.repetition_penalty = self.repetition_penalty.unwrap_or(s.repetition_penalty);
        s.max_tokens = self.max_tokens.unwrap_or(s.max_tokens);
        s.context_policy = self.context_policy.unwrap_or(s.context_policy);
        s
    }

    /// Refuses values no reply could run with, as the app's settings do.
    pub fn validate(&self) -> AppResult<()> {
        self.over(&Settings::default())
            .validate()
            .map_err(|m| AppError::new("INVALID_SETTINGS", m))?;
        if self.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(AppError::new(
                "INVALID_SETTINGS",
                "a chat's model cannot be an empty name",
            ));
        }
        Ok(())
    }

    /// The chat's stored JSON (absent or `null`: nothing set). A record that
    /// no longer reads (written by a newer app) is refused, not half-applied.
    pub fn from_stored(stored: Option<&serde_json::Value>) -> AppResult<ChatSettings> {
        match stored {
            None | Some(serde_json::Value::Null) => Ok(ChatSettings::default()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                AppError::new("INVALID_SETTINGS", format!("this chat's settings do not read: {e}"))
            }),
        }
    }

    pub fn to_stored(&self) -> Option<serde_json::Value> {
        (self != &ChatSettings::default())
            .then(|| serde_json::to_value(self).expect("chat settings serialize"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_follow_the_app_and_set_ones_win() {
        let global = Settings {
            temperature: 0.7,
            system_prompt: "Be brief.".into(),
            thinking: true,
            ..Default::default()
        };
        let chat =
            ChatSettings { temperature: Some(0.1), thinking: Some(false), ..Default::default() };
        let s = chat.over(&global);
        assert_eq!(
            (s.temperature, s.thinking, s.system_prompt.as_str()),
            (0.1, false, "Be brief.")
        );
        assert_eq!(s.top_p, global.top_p);
        // an empty system prompt is a choice: none
        let none = ChatSettings { system_prompt: Some(String::new()), ..Default::default() };
        assert_eq!(none.over(&global).system_prompt, "");
        assert_eq!(ChatSettings::default().over(&global), global);
    }

    #[test]
    fn bad_values_and_unknown_fields_are_refused() {
        assert!(ChatSettings { top_p: Some(0.0), ..Default::default() }.validate().is_err());
        assert!(ChatSettings { model: Some(" ".into()), ..Default::default() }.validate().is_err());
        ChatSettings { temperature: Some(0.0), ..Default::default() }.validate().unwrap();
        let err =
            ChatSettings::from_stored(Some(&serde_json::json!({"temprature": 1}))).unwrap_err();
        assert_eq!(err.code, "INVALID_SETTINGS");
        assert_eq!(ChatSettings::from_stored(None).unwrap(), ChatSettings::default());
        assert_eq!(ChatSettings::default().to_stored(), None);
    }
}
