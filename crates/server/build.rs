// Bakes an rpath to libmlx into the tests so they run outside
// `cargo run` / `cargo test` too, as crates/engine/build.rs does for `vlm`.
// DEP_MLX_LIB_DIR comes from mlx-sys (`links = "mlx"`), handed only to
// crates that depend on it directly, hence the mlx-sys dependency.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
