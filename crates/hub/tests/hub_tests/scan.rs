//! Scanning models on disk: a fake Hugging Face cache, a models folder and
//! user-added GGUF files, with supported, unsupported, broken and partial models.
use crate::common;

use std::path::{Path, PathBuf};

use common::{write_gguf, GgufValue};
use hub::{HfCache, LocalModel, Location, ModelFormat, ScanConfig};

const COMMIT: &str = "abcdef0123456789abcdef0123456789abcdef01";

/// Writes `files` as blobs with snapshot symlinks, the way the Hub cache does.
fn cached_repo(cache: &Path, repo: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::write(dir.join("refs/main"), COMMIT).unwrap();
    for (name, content) in files {
        let blob = common::sha256_hex(content);
        std::fs::write(dir.join("blobs").join(&blob), content).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{blob}"), snapshot.join(name)).unwrap();
    }
    dir
}

fn gguf_bytes(dir: &Path, arch: &str) -> Vec<u8> {
    let path = dir.join(format!("{arch}-tmp.gguf"));
    write_gguf(&path, 3, &[("general.architecture", GgufValue::Str(arch.into()))]);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(path).unwrap();
    bytes
}

fn by_id<'a>(models: &'a [LocalModel], id: &str) -> &'a LocalModel {
    models.iter().find(|m| m.id == id).unwrap_or_else(|| panic!("no {id} in {:#?}", models))
}

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[test]
fn scans_the_cache_the_models_folder_and_added_files() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("hf/hub");
    let weights: &[u8] = b"not really safetensors";
    cached_repo(
        &cache,
        "org/good",
        &[("config.json", br#"{"model_type": "llama"}"#), ("model.safetensors", weights)],
    );
    cached_repo(
        &cache,
        "org/vision",
        &[("config.json", br#"{"model_type": "qwen2_5_vl"}"#), ("model.safetensors", weights)],
    );
    cached_repo(
        &cache,
        "org/broken",
        &[("config.json", b"{not json"), ("model.safetensors", weights)],
    );
    cached_repo(
        &cache,
        "org/no-type",
        &[("config.json", br#"{"hidden_size": 8}"#), ("model.safetensors", weights)],
    );
    cached_repo(&cache, "org/no-weights", &[("config.json", br#"{"model_type": "llama"}"#)]);
    let gguf = gguf_bytes(root.path(), "qwen2");
    cached_repo(
        &cache,
        "org/quantized-GGUF",
        &[("model-Q4_K_M.gguf", &gguf), ("README.md", b"# hi")],
    );
    cached_repo(&cache, "org/readme-only", &[("README.md", b"# not a model")]);
    // a download that has not finished: a part file and no snapshot yet
    let partial = cache.join("models--org--partial/blobs");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("0123.part"), b"half").unwrap();
    // a snapshot link whose blob is gone
    let dangling = cached_repo(
        &cache,
        "org/dangling",
        &[("config.json", br#"{"model_type": "llama"}"#), ("model.safetensors", weights)],
    );
    std::fs::remove_file(dangling.join("blobs").join(common::sha256_hex(weights))).unwrap();
    // other repo kinds are not models
    std::fs::create_dir_all(cache.join("datasets--org--data/snapshots")).unwrap();

    let models_dir = root.path().join("models");
    std::fs::create_dir_all(models_dir.join("mine")).unwrap();
    std::fs::write(models_dir.join("mine/config.json"), br#"{"model_type": "qwen3"}"#).unwrap();
    std::fs::write(models_dir.join("mine/model.safetensors"), weights).unwrap();
    std::fs::create_dir_all(models_dir.join("just-a-folder")).unwrap();
    std::fs::write(models_dir.join("loose.gguf"), gguf_bytes(root.path(), "llama")).unwrap();
    std::fs::write(models_dir.join("notes.txt"), b"ignored").unwrap();

    let scan = ScanConfig {
        hf_cache: Some(HfCache::new(&cache)),
        models_dir: Some(models_dir.clone()),
        user_paths: vec![default_model(), root.path().join("moved-away.gguf")],
        supported: vec!["llama".into(), "qwen2".into()],
    };
    let models = scan.scan();
    let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(models.len(), 12, "{ids:?}");

    let good = by_id(&models, "hf:org/good");
    assert_eq!(good.architecture.as_deref(), Some("llama"));
    assert!(good.supported && good.error.is_none() && !good.partial);
    assert_eq!(good.format, ModelFormat::Folder);
    assert_eq!(good.path, cache.join("models--org--good/snapshots").join(COMMIT));
    assert_eq!(
        good.location,
        Location::HfCache { repo: "org/good".into(), commit: Some(COMMIT.into()) }
    );
    assert!(good.size_bytes >= weights.len() as u64);

    let vision = by_id(&models, "hf:org/vision");
    assert_eq!(vision.architecture.as_deref(), Some("qwen2_5_vl"));
    assert!(!vision.supported && vision.error.is_none(), "unsupported, but not broken");

    let broken = by_id(&models, "hf:org/broken");
    assert!(!broken.supported);
    assert!(broken.error.as_deref().unwrap().contains("config.json"), "{broken:?}");
    let no_type = by_id(&models, "hf:org/no-type");
    assert!(no_type.error.as_deref().unwrap().contains("model_type"), "{no_type:?}");
    let no_weights = by_id(&models, "hf:org/no-weights");
    assert!(no_weights.error.as_deref().unwrap().contains("safetensors"), "{no_weights:?}");
    let dangling = by_id(&models, "hf:org/dangling");
    assert!(dangling.error.as_deref().unwrap().contains("model.safetensors"), "{dangling:?}");
    assert!(!dangling.supported);

    let quantized = by_id(&models, "hf:org/quantized-GGUF/model-Q4_K_M.gguf");
    assert_eq!(quantized.format, ModelFormat::Gguf);
    assert_eq!(quantized.architecture.as_deref(), Some("qwen2"));
    assert!(quantized.supported);
    assert_eq!(quantized.size_bytes, gguf.len() as u64);

    let partial = by_id(&models, "hf:org/partial");
    assert!(partial.partial && !partial.supported);

    let mine = by_id(&models, "dir:mine");
    assert_eq!(mine.architecture.as_deref(), Some("qwen3"));
    assert!(!mine.supported && mine.error.is_none());
    assert_eq!(mine.location, Location::ModelsDir { entry: "mine".into() });
    let loose = by_id(&models, "dir:loose.gguf");
    assert_eq!((loose.architecture.as_deref(), loose.supported), (Some("llama"), true));

    let real = by_id(&models, &format!("file:{}", default_model().display()));
    assert_eq!(real.architecture.as_deref(), Some("llama"));
    assert!(real.supported);
    assert_eq!(real.size_bytes, std::fs::metadata(default_model()).unwrap().len());
    let gone = by_id(&models, &format!("file:{}", root.path().join("moved-away.gguf").display()));
    assert!(gone.error.is_some() && !gone.supported);

    // sorted by name, case-insensitively
    let names: Vec<String> = models.iter().map(|m| m.name.to_lowercase()).collect();
    assert!(names.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
}

#[test]
fn deleting_stays_inside_the_managed_folders() {
    let root = tempfile::tempdir().unwrap();
    let models_dir = root.path().join("models");
    std::fs::create_dir_all(models_dir.join("mine")).unwrap();
    std::fs::write(models_dir.join("mine/config.json"), br#"{"model_type": "llama"}"#).unwrap();
    std::fs::write(models_dir.join("mine/model.safetensors"), vec![1u8; 1000]).unwrap();
    let outside = root.path().join("precious.gguf");
    write_gguf(&outside, 3, &[("general.architecture", GgufValue::Str("llama".into()))]);

    // a model folder the user added from elsewhere ("Add model…")
    let added = root.path().join("elsewhere/My Model");
    std::fs::create_dir_all(&added).unwrap();
    std::fs::write(added.join("config.json"), br#"{"model_type": "llama"}"#).unwrap();
    std::fs::write(added.join("model.safetensors"), vec![1u8; 500]).unwrap();

    let scan = ScanConfig {
        models_dir: Some(models_dir.clone()),
        user_paths: vec![outside.clone(), added.clone()],
        supported: vec!["llama".into()],
        ..ScanConfig::default()
    };
    let models = scan.scan();
    let mine = by_id(&models, "dir:mine");
    assert_eq!(hub::disk_usage(&mine.path).unwrap(), mine.size_bytes);

    let user_file = by_id(&models, &format!("file:{}", outside.display()));
    assert_eq!(scan.delete(user_file).unwrap_err().code(), "DELETE_NOT_ALLOWED");
    assert!(outside.exists());
    let user_folder = by_id(&models, &format!("file:{}", added.display()));
    assert_eq!(
        (user_folder.name.as_str(), user_folder.format, user_folder.supported),
        ("My Model", ModelFormat::Folder, true)
    );
    assert_eq!(user_folder.location, Location::UserFile);
    assert_eq!(scan.delete(user_folder).unwrap_err().code(), "DELETE_NOT_ALLOWED");
    assert!(added.join("model.safetensors").exists());

    // an entry forged by the UI cannot reach outside the models folder
    let mut forged = mine.clone();
    forged.location = Location::ModelsDir { entry: "../precious.gguf".into() };
    assert_eq!(scan.delete(&forged).unwrap_err().code(), "DELETE_NOT_ALLOWED");
    assert!(outside.exists());

    assert_eq!(scan.delete(mine).unwrap(), mine.size_bytes);
    assert!(!models_dir.join("mine").exists());
    // what the user added stays: the GGUF file and the folder
    assert_eq!(scan.scan().len(), 2);
}
