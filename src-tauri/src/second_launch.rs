//! A second launch must never crash. When the app is already running on
//! the same data folder, the single-instance plugin hands the new command
//! line to it and exits (lib.rs). If that app is closing at that moment, it
//! still owns its D-Bus name but no longer answers: the hand-off fails
//! ("failed to forward arguments to the running instance: … NoReply"), the
//! plugin's setup returns the error, and building the app failed with a
//! panic (seen in a CI run). Instead the launch starts itself again after a
//! short wait: by then the first app is gone and this one starts normally
//! (or, if it came back, hands its files over after all). The process
//! replaces itself (`exec`), so its id, arguments and environment stay; a
//! count in the environment bounds the tries.
use std::time::Duration;

/// How many times a launch has started itself again (in its environment).
pub const RETRIES_ENV: &str = "VLM_CHAT_HANDOFF_RETRIES";

/// Tries before giving up: with the waits below, about 11 s in all, far
/// longer than an app takes to close.
pub const MAX_RETRIES: u32 = 10;

/// What the plugin's error says when the running app did not take the
/// command line (tauri-plugin-single-instance's linux.rs).
const FAILED_HANDOFF: &str = "failed to forward arguments to the running instance";

/// What to do after building the app failed with `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterBuildError {
    /// Start again after `wait`, as try number `retry`.
    StartAgain { wait: Duration, retry: u32 },
    /// Say why and exit (no panic): the error is not a failed hand-off, or
    /// the other app never went away.
    Exit { message: String },
}

/// The decision for `error`, this launch having started itself again
/// `retries` times already.
pub fn after_build_error(error: &str, retries: u32) -> AfterBuildError {
    if !error.contains(FAILED_HANDOFF) {
        return AfterBuildError::Exit { message: format!("vlm-chat could not start: {error}") };
    }
    if retries >= MAX_RETRIES {
        return AfterBuildError::Exit {
            message: format!(
                "vlm-chat: another VLM Chat on this data folder neither answers nor closes; quit it and start again ({error})"
            ),
        };
    }
    // the other app is closing: a little longer each time
    AfterBuildError::StartAgain {
        wait: Duration::from_millis(200 * u64::from(retries + 1)),
        retry: retries + 1,
    }
}

/// The tries so far, from this process's environment.
pub fn retries_so_far() -> u32 {
    std::env::var(RETRIES_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Acts on building the app having failed with `error`: never returns.
pub fn handle_build_error(error: &str) -> ! {
    match after_build_error(error, retries_so_far()) {
        AfterBuildError::StartAgain { wait, retry } => {
            tracing::warn!(retry, %error, "the running app did not take this launch's files; starting again");
            std::thread::sleep(wait);
            start_again(retry)
        }
        AfterBuildError::Exit { message } => {
            tracing::error!("{message}");
            eprintln!("{message}");
            std::process::exit(1);
        }
    }
}

/// Replaces this process with a new run of the same binary and arguments.
fn start_again(retry: u32) -> ! {
    let mut args = std::env::args_os();
    let program = std::env::current_exe().ok().or_else(|| args.next().map(Into::into));
    let Some(program) = program else {
        eprintln!("vlm-chat: cannot find its own program to start again");
        std::process::exit(1);
    };
    let mut command = std::process::Command::new(program);
    command.args(std::env::args_os().skip(1)).env(RETRIES_ENV, retry.to_string());
    #[cfg(unix)]
    let error = {
        use std::os::unix::process::CommandExt;
        command.exec()
    };
    #[cfg(not(unix))]
    let error = match command.spawn() {
        Ok(_) => std::process::exit(0),
        Err(e) => e,
    };
    eprintln!("vlm-chat: cannot start again: {error}");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error as building the app reports it in the CI run's case.
    const NO_REPLY: &str = "failed to setup plugin `single-instance`: failed to forward arguments to the running instance: \
         org.freedesktop.DBus.Error.NoReply: Message recipient disconnected from message bus without replying";

    #[test]
    fn a_failed_hand_off_starts_again_a_little_later_each_time() {
        let mut waits = Vec::new();
        for retries in 0..MAX_RETRIES {
            match after_build_error(NO_REPLY, retries) {
                AfterBuildError::StartAgain { wait, retry } => {
                    assert_eq!(retry, retries + 1);
                    waits.push(wait);
                }
                other => panic!("try {retries}: {other:?}"),
            }
        }
        assert!(waits.windows(2).all(|w| w[0] < w[1]), "{waits:?}");
        let total: Duration = waits.iter().sum();
        assert!(total >= Duration::from_secs(5) && total <= Duration::from_secs(15), "{total:?}");
    }

    #[test]
    fn after_the_last_try_or_for_any_other_error_it_exits_saying_why() {
        let AfterBuildError::Exit { message } = after_build_error(NO_REPLY, MAX_RETRIES) else {
            panic!("gave up")
        };
        assert!(message.contains("neither answers nor closes"), "{message}");
        let AfterBuildError::Exit { message } =
            after_build_error("failed to create the window: no display", 0)
        else {
            panic!("not a hand-off")
        };
        assert_eq!(message, "vlm-chat could not start: failed to create the window: no display");
    }

    #[test]
    fn the_count_of_tries_comes_from_the_environment() {
        // this test's own process: unset, then set (no other test reads it)
        std::env::remove_var(RETRIES_ENV);
        assert_eq!(retries_so_far(), 0);
        std::env::set_var(RETRIES_ENV, "3");
        assert_eq!(retries_so_far(), 3);
        std::env::set_var(RETRIES_ENV, "junk");
        assert_eq!(retries_so_far(), 0);
        std::env::remove_var(RETRIES_ENV);
    }
}
