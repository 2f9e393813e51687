// Two jobs: Tauri's own build step (it reads tauri.conf.json and the
// capabilities), and an rpath to libmlx so the binary runs outside
// `cargo run` (as crates/cli/build.rs does for `vlm`).
use std::path::Path;

fn main() {
    // generate_context! embeds ../ui/dist at compile time; without it the
    // error from the macro is cryptic, so say what to do instead.
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/dist/index.html");
    if !dist.is_file() {
        panic!(
            "\n\nui/dist is missing: build the web UI first with\n    npm --prefix ui ci && npm --prefix ui run build\n\
             (scripts/run.sh and scripts/test.sh do this)\n"
        );
    }
    println!("cargo:rerun-if-changed=../ui/dist");
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // in the .app bundle libmlx.dylib sits in Contents/Frameworks (see
    // tauri.conf.json bundle.macOS.files and scripts/stage-mlx-for-bundle.sh)
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,@executable_path/../Frameworks");
    }
    tauri_build::build();
}
