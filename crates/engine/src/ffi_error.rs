//! MLX's error messages for the mlx-c calls we make ourselves.
//!
//! mlx-c reports a failure through one process-wide handler; its default one
//! prints and calls `exit(-1)`. mlx-rs installs its own handler on its first
//! fallible call and keeps each message in a thread-local only mlx-rs can
//! read. mlx-rs has no distributed API and passes no quantization mode, so
//! we call mlx-c directly there and need the messages too: we make mlx-rs
//! install its handler first, then install one that keeps a copy for us and
//! passes every message on to mlx-rs's handler unchanged, so mlx-rs's own
//! error reporting works exactly as before.
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Once;

use mlx_rs::{Device, Stream};

extern "C" {
    /// mlx-rs 0.33's handler (exported `#[no_mangle]`): it stashes the
    /// message for the failing mlx-rs call on this thread.
    fn default_mlx_error_handler(msg: *const c_char, data: *mut c_void);
}

thread_local! {
    /// The newest MLX message on this thread, for our own calls.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

unsafe extern "C" fn keep_and_forward(msg: *const c_char, data: *mut c_void) {
    if !msg.is_null() {
        let text = unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned();
        // try_with: MLX may report from a thread whose locals are being torn down.
        let _ = LAST.try_with(|last| *last.borrow_mut() = Some(text));
    }
    unsafe { default_mlx_error_handler(msg, data) };
}

static INSTALL: Once = Once::new();

/// Installs our handler (once, after mlx-rs's, which it then forwards to).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        // Any fallible mlx-rs call registers mlx-rs's handler; had ours come
        // first, that registration would replace it.
        let _ = Stream::try_default_on_device(&Device::cpu());
        unsafe {
            mlx_sys::mlx_set_error_handler(Some(keep_and_forward), std::ptr::null_mut(), None)
        };
    });
}

/// Forgets an earlier message, so a failure reports its own.
pub(crate) fn clear() {
    LAST.with(|last| last.borrow_mut().take());
}

/// The message of the call that just failed on this thread, without the
/// mlx-c source location it ends with (" at /…/distributed_group.cpp:39").
pub(crate) fn take(what: &str, status: i32) -> String {
    let message = LAST
        .with(|last| last.borrow_mut().take())
        .unwrap_or_else(|| format!("{what} failed with status {status} (MLX gave no message)"));
    without_location(&message).to_string()
}

fn without_location(message: &str) -> &str {
    match message.rfind(" at /") {
        Some(at) if message[at..].contains(".cpp:") || message[at..].contains(".h:") => {
            &message[..at]
        }
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_source_location_is_left_out() {
        let raw = "[ring] Couldn't bind socket (error: 99) at /root/.cargo/registry/src/x/mlx-c/mlx/c/distributed_group.cpp:39";
        assert_eq!(super::without_location(raw), "[ring] Couldn't bind socket (error: 99)");
        assert_eq!(
            super::without_location("connection to a peer was lost"),
            "connection to a peer was lost"
        );
    }
}
