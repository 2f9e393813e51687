//! How the web view draws on Linux. Without a GPU the window has no DRM
//! render node (`/dev/dri/renderD*`), and WebKitGTK's compositing mode then
//! composites every frame of the whole window in software (Mesa's llvmpipe):
//! measured under Xvfb, a streaming reply cost the web view 25–33% of a core
//! and a focused, idle chat 2.4% (scripts/bench-app-vs-api.sh, issue 29).
//! Without compositing mode WebKit paints only what changed, on the CPU,
//! which is what such a machine has. With a render node the GPU composites
//! and nothing is changed. A `WEBKIT_DISABLE_COMPOSITING_MODE` the user set
//! is left as it is.
use std::path::Path;

/// The variable WebKitGTK reads when the web process starts.
pub const DISABLE_COMPOSITING: &str = "WEBKIT_DISABLE_COMPOSITING_MODE";

/// Whether `dri` (normally `/dev/dri`) holds a render node: a GPU that
/// WebKit can composite with.
pub fn has_render_node(dri: &Path) -> bool {
    std::fs::read_dir(dri)
        .map(|entries| {
            entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
        })
        .unwrap_or(false)
}

/// Whether the app turns compositing off, given whether the user already
/// chose (`set_by_user`) and whether there is a GPU.
pub fn disable_compositing(set_by_user: bool, render_node: bool) -> bool {
    !set_by_user && !render_node
}

/// Sets the web view's drawing for this machine. Call first in `run`, before
/// any thread starts (the environment is not safe to change beside readers)
/// and before WebKit reads it.
pub fn choose_for_this_machine() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let set_by_user = std::env::var_os(DISABLE_COMPOSITING).is_some();
    if disable_compositing(set_by_user, has_render_node(Path::new("/dev/dri"))) {
        std::env::set_var(DISABLE_COMPOSITING, "1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_render_node_is_a_gpu_to_composite_with() {
        let dri = tempfile::tempdir().unwrap();
        assert!(!has_render_node(dri.path()), "an empty /dev/dri");
        assert!(!has_render_node(&dri.path().join("missing")), "no /dev/dri at all");
        std::fs::write(dri.path().join("card0"), b"").unwrap();
        assert!(!has_render_node(dri.path()), "a display card alone renders nothing");
        std::fs::write(dri.path().join("renderD128"), b"").unwrap();
        assert!(has_render_node(dri.path()));
    }

    #[test]
    fn compositing_goes_off_only_without_a_gpu_and_a_choice_of_the_user() {
        assert!(disable_compositing(false, false));
        assert!(!disable_compositing(false, true), "a GPU composites");
        assert!(!disable_compositing(true, false), "the user's own setting stays");
    }
}
