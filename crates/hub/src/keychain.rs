//! The Hugging Face token the user gives the app (Settings), the API key
//! of the app's own OpenAI server and the secrets of its MCP servers (their
//! environment values or HTTP headers), kept in the OS keychain through the
//! `keyring` crate — never in the app's database, which is a plain file any
//! backup or sync tool copies.
//!
//! Where it lives: on macOS the login Keychain; on Linux the Secret Service
//! (GNOME Keyring, KWallet, KeePassXC) over the session D-Bus. Not the
//! kernel's keyutils, although this machine allows its syscalls: its keyrings
//! are memory only and are gone after a reboot (or the user's last logout),
//! so a token saved in Settings would silently disappear, which is worse than
//! a clear "no keychain" error.
//!
//! Every call blocks (a D-Bus round trip, or a Keychain prompt on macOS):
//! call it off the async runtime (`spawn_blocking`).
use crate::error::{Error, Result};

/// The service name the app's entry is filed under (the app identifier, so
/// the user recognises it in Keychain Access or Seahorse).
pub const APP_SERVICE: &str = "dev.vlm.chat";
/// The account name of the Hub token's entry.
const HUB_TOKEN: &str = "huggingface-token";
/// The account name of the app's OpenAI server's API key.
const SERVER_API_KEY: &str = "openai-server-api-key";
/// The account name of an MCP server's secrets is this and the server's name.
const MCP_SERVER_PREFIX: &str = "mcp-server:";
/// Longer than any Hub token (37 characters today) by far; a paste of a
/// whole page is refused instead of stored.
const MAX_TOKEN_LEN: usize = 512;
/// The most an MCP server's secrets (JSON of its values) may take.
const MAX_SECRET_LEN: usize = 64 * 1024;

/// One entry of the OS keychain: the Hub token, or (see
/// [`Keychain::server_api_key`]) the app server's API key, or (see
/// [`Keychain::mcp_server`]) an MCP server's secrets.
#[derive(Debug, Clone)]
pub struct Keychain {
    /// The keychain service the entry is filed under.
    service: String,
    /// Which secret of the service.
    account: String,
}

impl Keychain {
    /// The app's own Hub token entry.
    pub fn app() -> Keychain {
        Keychain::with_service(APP_SERVICE)
    }

    /// A Hub token entry under another service name (tests keep clear of the app's).
    pub fn with_service(service: impl Into<String>) -> Keychain {
        Keychain { service: service.into(), account: HUB_TOKEN.into() }
    }

    /// The same service's entry for the API key of the app's OpenAI server.
    pub fn server_api_key(&self) -> Keychain {
        Keychain { service: self.service.clone(), account: SERVER_API_KEY.into() }
    }

    /// The same service's entry for the secrets of the MCP server `name`
    /// (what the app keeps there is its business: JSON of several values).
    pub fn mcp_server(&self, name: &str) -> Keychain {
        Keychain { service: self.service.clone(), account: format!("{MCP_SERVER_PREFIX}{name}") }
    }

    fn entry(&self) -> Result<keyring::Entry> {
        keyring::Entry::new(&self.service, &self.account).map_err(unavailable)
    }

    /// The stored token; `None` when none was saved.
    pub fn read(&self) -> Result<Option<String>> {
        match self.entry()?.get_password() {
            Ok(token) => Ok(Some(token)),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Checks and saves `token` (surrounding whitespace from a paste is
    /// dropped), replacing any saved before. Returns what was saved.
    pub fn store(&self, token: &str) -> Result<String> {
        let token = validate(token, self.account == HUB_TOKEN)?;
        self.entry()?.set_password(&token).map_err(unavailable)?;
        Ok(token)
    }

    /// Saves `secret` as it is (no token check: it may hold spaces, quotes
    /// and any script), replacing any saved before; at most 64 KiB.
    pub fn store_secret(&self, secret: &str) -> Result<()> {
        if secret.len() > MAX_SECRET_LEN {
            return Err(Error::InvalidToken(format!(
                "the secrets take {} bytes; at most {MAX_SECRET_LEN} are kept",
                secret.len()
            )));
        }
        self.entry()?.set_password(secret).map_err(unavailable)
    }

    /// Deletes the saved token; `false` when there was none.
    pub fn remove(&self) -> Result<bool> {
        match self.entry()?.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring::Error::NoEntry) => Ok(false),
            Err(e) => Err(unavailable(e)),
        }
    }
}

/// The token as the UI may show it: its kind prefix and last four
/// characters ("hf_…abcd"), enough to tell two tokens apart, useless to
/// anyone who reads the screen.
pub fn mask(token: &str) -> String {
    let chars: Vec<char> = token.chars().collect();
    if chars.len() < 12 {
        // too short to show any of it without giving a good part away
        return "…".to_string();
    }
    let prefix: String = if token.starts_with("hf_") { "hf_".into() } else { String::new() };
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{prefix}…{tail}")
}

/// A token that can go into an `Authorization` header, or why not; a Hub
/// token's messages say where to get a good one.
fn validate(token: &str, hub: bool) -> Result<String> {
    let token = token.trim();
    let invalid = |why: &str| Err(Error::InvalidToken(why.to_string()));
    if token.is_empty() {
        return invalid("the token is empty");
    }
    if token.len() > MAX_TOKEN_LEN {
        let usual = if hub { "a Hugging Face token is about 40" } else { "at most 512 are kept" };
        return invalid(&format!("the token is {} characters long; {usual}", token.len()));
    }
    if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
        return invalid(&if hub {
            format!(
                "the token contains {c:?}; a Hugging Face token has only letters, digits and '_' (copy it again from huggingface.co/settings/tokens)"
            )
        } else {
            format!("the key contains {c:?}; a key goes into an HTTP header: letters, digits and punctuation only")
        });
    }
    Ok(token.to_string())
}

/// A keychain failure as the error the UI explains ("no keychain").
fn unavailable(e: keyring::Error) -> Error {
    let hint = if cfg!(target_os = "macos") {
        "check that the login keychain is unlocked in Keychain Access"
    } else {
        "the token is kept by a Secret Service (GNOME Keyring, KWallet or KeePassXC): start one, unlock it and restart the app, or set HF_TOKEN instead"
    };
    Error::Keychain(format!("{e}; {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tokens_are_refused_with_the_reason_before_the_keychain_is_touched() {
        for (token, why) in [
            ("", "empty"),
            ("   \n", "empty"),
            ("hf_abc def", "contains ' '"),
            ("hf_abcé", "contains 'é'"),
        ] {
            let err = validate(token, true).unwrap_err();
            assert_eq!(err.code(), "INVALID_TOKEN");
            assert!(err.to_string().contains(why), "{token:?}: {err}");
        }
        let long = "hf_".to_string() + &"a".repeat(600);
        assert!(validate(&long, true).unwrap_err().to_string().contains("603 characters"));
        assert_eq!(validate("  hf_AbC123xyz\n", true).unwrap(), "hf_AbC123xyz");
        assert!(validate("my key", false).unwrap_err().to_string().contains("HTTP header"));
    }

    #[test]
    fn the_mask_shows_the_kind_and_last_four_only() {
        assert_eq!(mask("hf_abcdefghijklmnopqrstuvwxyzABCD"), "hf_…ABCD");
        assert_eq!(mask("api_org_0123456789abcd"), "…abcd");
        assert_eq!(mask("hf_short"), "…");
    }
}
