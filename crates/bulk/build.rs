// Bakes an rpath to libmlx into the tests so their binaries run on their own
// (as crates/server/build.rs does). DEP_MLX_LIB_DIR comes from mlx-sys
// (`links = "mlx"`), handed only to crates that depend on it directly.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
