// Bakes an rpath to libmlx into the `vlm` binary so it runs
// outside `cargo run` / `cargo test` too (cargo does not pass a dependency's
// link-args on). DEP_MLX_LIB_DIR comes from our mlx-sys (`links = "mlx"`),
// which must be a direct dependency for cargo to hand it over.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
