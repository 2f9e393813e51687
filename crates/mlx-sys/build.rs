//! Build script of our drop-in `mlx-sys` 0.7.0.
//!
//! The registry's mlx-sys builds mlx-c with CMake, and mlx-c's CMakeLists
//! downloads MLX's sources from GitHub (unreachable on our Linux machines) and
//! links Apple frameworks unconditionally. We instead:
//!
//! 1. take mlx-c's sources from the registry's `mlx-sys-0.7.0` package that
//!    cargo unpacked in `$CARGO_HOME/registry/src/*/` (never copied into our
//!    repo; `scripts/setup.sh` runs the fetch, and so does this script as a
//!    last resort), or from `$MLX_C_SRC`;
//! 2. link a *prebuilt* MLX 0.32.2 from its PyPI wheel: `mlx-cpu` on Linux
//!    (`lib/libmlx.so`), `mlx` on macOS (`lib/libmlx.dylib` + `mlx.metallib`),
//!    found through `$MLX_DIR`, the project's `.venv`, or `python3`;
//! 3. build mlx-c as a static library with `MLX_C_USE_SYSTEM_MLX=ON` against a
//!    tiny generated `MLXConfig.cmake` that imports that library;
//! 4. run bindgen over `mlx/c/*.h` with upstream's settings;
//! 5. publish `DEP_MLX_LIB_DIR` so dependents can bake an rpath.
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

const UPSTREAM: &str = "mlx-sys-0.7.0";
const MLX_VERSION: &str = "0.32.2";

fn is_macos() -> bool {
    env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos")
}

fn libmlx_name() -> &'static str {
    if is_macos() {
        "libmlx.dylib"
    } else {
        "libmlx.so"
    }
}

/// Writes only on change: the prelude is force-included in every mlx-c
/// translation unit, so touching it would make CMake rebuild all of mlx-c.
fn write_if_changed(path: &Path, contents: &str) {
    if fs::read_to_string(path).ok().as_deref() != Some(contents) {
        fs::write(path, contents).unwrap();
    }
}

fn out_dir() -> PathBuf {
    PathBuf::from(env::var_os("OUT_DIR").unwrap())
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap())
}

// ---------------------------------------------------------------------------
// mlx-c sources
// ---------------------------------------------------------------------------

fn is_mlx_c(dir: &Path) -> bool {
    dir.join("CMakeLists.txt").is_file() && dir.join("mlx/c/array.h").is_file()
}

fn cargo_home() -> Option<PathBuf> {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// `registry/<kind>/<index>/<name>` for every registry index directory.
fn registry_entries(kind: &str, name: &str) -> Vec<PathBuf> {
    let Some(home) = cargo_home() else { return vec![] };
    let Ok(dirs) = fs::read_dir(home.join("registry").join(kind)) else { return vec![] };
    let mut found: Vec<PathBuf> =
        dirs.flatten().map(|e| e.path().join(name)).filter(|p| p.exists()).collect();
    found.sort();
    found
}

fn find_mlx_c() -> Option<PathBuf> {
    if let Some(p) = env::var_os("MLX_C_SRC") {
        let p = PathBuf::from(p);
        assert!(is_mlx_c(&p), "MLX_C_SRC={} is not an mlx-c source tree", p.display());
        return Some(p);
    }
    // The unpacked package.
    for krate in registry_entries("src", UPSTREAM) {
        let p = krate.join("src/mlx-c");
        if is_mlx_c(&p) {
            return Some(p);
        }
    }
    // Downloaded but not unpacked: a .crate is a .tar.gz.
    for dotcrate in registry_entries("cache", &format!("{UPSTREAM}.crate")) {
        let dest = out_dir().join("upstream");
        let p = dest.join(UPSTREAM).join("src/mlx-c");
        if is_mlx_c(&p) {
            return Some(p);
        }
        fs::create_dir_all(&dest).unwrap();
        let unpacked = Command::new("tar")
            .arg("-xzf")
            .arg(&dotcrate)
            .arg("-C")
            .arg(&dest)
            .status()
            .is_ok_and(|s| s.success());
        if unpacked && is_mlx_c(&p) {
            return Some(p);
        }
    }
    None
}

fn locate_mlx_c() -> PathBuf {
    if let Some(p) = find_mlx_c() {
        return p;
    }
    // Last resort: ask cargo to fetch it (opt out with MLX_SYS_NO_AUTO_FETCH=1).
    let helper = manifest_dir().join("upstream-fetch/Cargo.toml");
    if env::var_os("MLX_SYS_NO_AUTO_FETCH").is_none() && helper.is_file() {
        let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        println!("cargo:warning=mlx-sys: fetching the registry's {UPSTREAM} for mlx-c's sources");
        let _ = Command::new(cargo).arg("fetch").arg("--manifest-path").arg(&helper).status();
        if let Some(p) = find_mlx_c() {
            return p;
        }
    }
    panic!(
        "mlx-sys: cannot find mlx-c's sources. Run\n  cargo fetch --manifest-path {}\n\
         (unpacks the registry's {UPSTREAM} into $CARGO_HOME/registry) or set \
         MLX_C_SRC=<dir with CMakeLists.txt and mlx/c>",
        helper.display()
    );
}

// ---------------------------------------------------------------------------
// The prebuilt MLX library
// ---------------------------------------------------------------------------

/// The MLX prefix (holds `lib/libmlx.*` and `include/mlx/mlx.h`); in a wheel
/// that is `<site-packages>/mlx`.
fn mlx_prefix_in(p: &Path) -> Option<PathBuf> {
    [p.to_path_buf(), p.join("mlx")].into_iter().find_map(|cand| {
        let ok = cand.join("lib").join(libmlx_name()).is_file()
            && cand.join("include/mlx/mlx.h").is_file();
        ok.then(|| cand.canonicalize().unwrap_or(cand))
    })
}

/// Pythons to ask where the wheel is: `$MLX_PYTHON`, the project's `.venv`
/// (made by scripts/setup.sh), then `python3`.
fn pythons() -> Vec<PathBuf> {
    if let Some(p) = env::var_os("MLX_PYTHON") {
        return vec![p.into()];
    }
    let mut found = vec![];
    for dir in manifest_dir().ancestors() {
        let venv = dir.join(".venv/bin/python");
        if venv.is_file() {
            found.push(venv);
            break;
        }
    }
    found.push("python3".into());
    found
}

fn locate_mlx() -> PathBuf {
    if let Some(p) = env::var_os("MLX_DIR") {
        let p = PathBuf::from(p);
        return mlx_prefix_in(&p).unwrap_or_else(|| {
            panic!(
                "MLX_DIR={} has no lib/{} and include/mlx/mlx.h (also tried <MLX_DIR>/mlx)",
                p.display(),
                libmlx_name()
            )
        });
    }
    // The wheels install `mlx` as a namespace package (no __init__.py), so
    // `mlx.__file__` is None: ask for the search locations instead.
    let script = "import importlib.util as u\ns=u.find_spec('mlx')\n\
                  print('\\n'.join(list(s.submodule_search_locations or [])) if s else '')";
    for py in pythons() {
        println!("cargo:rerun-if-changed={}", py.display());
        let Ok(out) = Command::new(&py).arg("-c").arg(script).output() else { continue };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(p) = mlx_prefix_in(Path::new(line.trim())) {
                return p;
            }
        }
    }
    let wheel = if is_macos() { "mlx" } else { "mlx-cpu" };
    panic!(
        "mlx-sys: cannot find MLX. Run scripts/setup.sh (installs `{wheel}=={MLX_VERSION}` into \
         .venv), or set MLX_DIR=<wheel root or its mlx/ dir>"
    );
}

// ---------------------------------------------------------------------------
// Generated CMake and C++ glue
// ---------------------------------------------------------------------------

/// Force-included in mlx-c's C++ and in bindgen's parse.
const PRELUDE: &str = r#"/* generated by mlx-sys build.rs */
#ifndef MLX_SYS_PRELUDE_H
#define MLX_SYS_PRELUDE_H
/* mlx-c's half.h defines float16_t / bfloat16_t (and the accessors mlx-rs
   calls unconditionally) only on ARM. */
#if !defined(__aarch64__) && !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC)
#ifdef __cplusplus
#include "mlx/types/half_types.h"
typedef mlx::core::float16_t float16_t;   /* 2-byte struct, the ABI of uint16_t */
typedef mlx::core::bfloat16_t bfloat16_t;
#else
typedef __fp16 float16_t;           /* bindgen (clang) only: becomes __BindgenFloat16(u16) */
typedef unsigned short bfloat16_t;  /* becomes u16, as mlx-rs expects */
#endif
#define HAS_FLOAT16 1
#define HAS_BFLOAT16 1
#endif
#ifdef __cplusplus
/* mlx-c's private/io.h uses C++20 std::format (only "{}" placeholders);
   libstdc++ before GCC 13 (Debian 12's compiler) has no <format>. */
#include <version>
#if !defined(__cpp_lib_format)
#include <sstream>
#include <string>
#include <string_view>
namespace std {
template <class... Args>
inline string format(string_view fmt, Args&&... args) {
  string parts[] = {"", ([&] { ostringstream o; o << args; return o.str(); }())...};
  string out;
  size_t next = 1;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '{' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      if (next < sizeof...(Args) + 1) out += parts[next++];
      ++i;
    } else {
      out += fmt[i];
    }
  }
  return out;
}
} // namespace std
#endif
#endif
#endif
"#;

/// Our own minimal MLXConfig.cmake instead of the wheel's: the CUDA wheels'
/// config runs find_dependency(CUDAToolkit), i.e. would need a CUDA toolkit
/// just to compile mlx-c, which only needs headers (libmlxc is static, so
/// CMake never links libmlx itself).
fn mlx_cmake_config(mlx: &Path) -> String {
    format!(
        "# generated by mlx-sys build.rs\n\
         if(NOT TARGET mlx)\n\
         \x20 add_library(mlx SHARED IMPORTED)\n\
         \x20 set_target_properties(mlx PROPERTIES\n\
         \x20   IMPORTED_LOCATION \"{p}/lib/{lib}\"\n\
         \x20   INTERFACE_INCLUDE_DIRECTORIES \"{p}/include\"\n\
         \x20   INTERFACE_COMPILE_FEATURES cxx_std_20)\n\
         endif()\n\
         set(MLX_FOUND TRUE)\n\
         set(MLX_INCLUDE_DIRS \"{p}/include\")\n\
         set(MLX_LIBRARIES mlx)\n",
        p = mlx.display(),
        lib = libmlx_name()
    )
}

fn build_mlx_c(mlx_c: &Path, mlx: &Path) -> PathBuf {
    let out = out_dir();
    let prelude = out.join("mlx_sys_prelude.h");
    write_if_changed(&prelude, PRELUDE);
    // CMAKE_PROJECT_INCLUDE runs after project(), so CMake's compiler probe
    // does not see the force-included prelude.
    let project_include = out.join("mlx_sys_prelude.cmake");
    write_if_changed(
        &project_include,
        &format!("add_compile_options(\"SHELL:-include {}\")\n", prelude.display()),
    );
    let mlx_cmake = out.join("mlx-cmake");
    fs::create_dir_all(&mlx_cmake).unwrap();
    write_if_changed(&mlx_cmake.join("MLXConfig.cmake"), &mlx_cmake_config(mlx));

    let mut config = cmake::Config::new(mlx_c);
    config
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("BUILD_SHARED_LIBS", "OFF")
        .define("MLX_DIR", &mlx_cmake)
        .define("CMAKE_INSTALL_LIBDIR", "lib")
        .define("CMAKE_PROJECT_INCLUDE", &project_include)
        // thin C wrappers: keep them optimized in debug builds too
        .profile("Release");
    if is_macos() {
        // The wheel's libmlx targets macOS 14 (Metal 3.1).
        config.define("CMAKE_OSX_DEPLOYMENT_TARGET", "14.0");
    }
    let dst = config.build();
    println!("cargo:rustc-link-search=native={}/lib", dst.display());
    println!("cargo:rustc-link-lib=static=mlxc");
    prelude
}

// ---------------------------------------------------------------------------
// Linking libmlx
// ---------------------------------------------------------------------------

fn link_mlx(mlx: &Path) {
    // Link through a symlink inside OUT_DIR to the wheel root (which holds mlx/
    // and, on Linux, mlx_cpu.libs/): cargo puts link-search dirs under OUT_DIR
    // on the library path for `cargo run` / `cargo test`, so those work with
    // no setup, and libmlx's own RPATH to its bundled libraries still resolves.
    let out = out_dir();
    let wheel_root = mlx.parent().unwrap();
    let link = out.join("mlx-wheel");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(wheel_root, &link).unwrap();
    let lib_dir = link.join(mlx.file_name().unwrap()).join("lib");
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlx");

    if is_macos() {
        // libmlx.dylib finds mlx.metallib beside itself, so shipping both in
        // one folder (the app bundle's Frameworks) is enough.
        println!("cargo:rustc-link-lib=dylib=c++");
        for framework in ["Metal", "Foundation", "Accelerate", "QuartzCore"] {
            println!("cargo:rustc-link-lib=framework={framework}");
        }
    } else {
        println!("cargo:rustc-link-lib=dylib=stdc++");
        link_openblas();
    }
    // Applies to this package's own tests only (cargo does not pass link-arg
    // on to dependents); dependents use DEP_MLX_LIB_DIR (below).
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}/lib", mlx.display());
}

/// The mlx-cpu wheel bundles the *reference* (netlib) BLAS: ~5 GFLOP/s sgemm
/// on our machines, ~60 with OpenBLAS. When the final binary itself needs
/// libopenblas.so.0 it comes before libmlx's bundled libblas in the loader's
/// global scope, so its cblas_sgemm wins (the effect of LD_PRELOAD).
/// `MLX_SYS_OPENBLAS=0` turns this off; `=1` or a soname forces it; unset, it
/// is on when the loader knows libopenblas.so.0 (Debian: libopenblas0-pthread).
fn link_openblas() {
    println!("cargo::rustc-check-cfg=cfg(mlx_sys_openblas)");
    let soname = match env::var("MLX_SYS_OPENBLAS").ok().as_deref() {
        Some("0") => return,
        Some("1") => "libopenblas.so.0".to_string(),
        Some(v) if !v.is_empty() => v.to_string(),
        _ => {
            let known = Command::new("/sbin/ldconfig")
                .arg("-p")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libopenblas.so.0"));
            if !known {
                println!("cargo:warning=mlx-sys: libopenblas.so.0 not found; float matmuls use the wheel's slow reference BLAS");
                return;
            }
            "libopenblas.so.0".to_string()
        }
    };
    println!("cargo:rustc-link-lib=dylib:+verbatim={soname}");
    println!("cargo:rustc-cfg=mlx_sys_openblas");
}

// ---------------------------------------------------------------------------
// Bindings
// ---------------------------------------------------------------------------

/// Same settings as upstream's `src/bindgen_config.rs`, plus our prelude.
fn generate_bindings(mlx_c: &Path, prelude: &Path) {
    let mut headers: Vec<PathBuf> = fs::read_dir(mlx_c.join("mlx/c"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "h"))
        .collect();
    headers.sort();
    let mut builder = bindgen::Builder::default()
        .rust_target("1.73.0".parse().expect("rust-version"))
        .clang_arg(format!("-I{}", mlx_c.display()))
        .clang_arg("-include")
        .clang_arg(prelude.display().to_string())
        .blocklist_function("malloc")
        .blocklist_function("realloc")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for h in &headers {
        builder = builder.header(h.to_string_lossy());
    }
    builder
        .generate()
        .expect("Unable to generate bindings")
        .write_to_file(out_dir().join("bindings.rs"))
        .expect("Couldn't write bindings!");
}

fn main() {
    for v in [
        "MLX_C_SRC",
        "MLX_DIR",
        "MLX_PYTHON",
        "CARGO_HOME",
        "MLX_SYS_NO_AUTO_FETCH",
        "MLX_SYS_OPENBLAS",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    let mlx_c = locate_mlx_c();
    let mlx = locate_mlx();

    let prelude = build_mlx_c(&mlx_c, &mlx);
    link_mlx(&mlx);

    // Metadata for dependents (DEP_MLX_*), as upstream publishes it.
    let include = env::join_paths([mlx.join("include"), mlx_c.clone()]).unwrap();
    println!("cargo::metadata=include={}", include.display());
    println!("cargo::metadata=defines=");
    println!("cargo::metadata=version={MLX_VERSION}");
    println!("cargo::metadata=lib_dir={}/lib", mlx.display());

    generate_bindings(&mlx_c, &prelude);
}
