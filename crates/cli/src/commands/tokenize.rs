//! `statelm tokenize`: tokenize text with a model's tokenizer.

use crate::Ctx;
use anyhow::{bail, Context, Result};
use serde_json::json;
use statelm_gguf::GgufFile;
use statelm_tokenizer::Tokenizer;
use std::io::Read;
use std::path::PathBuf;

/// Tokenize text with a model's tokenizer: one `ID  PIECE` line per token, or JSON
///
/// Only the tokenizer is read from the file (no weights are loaded). Special-token texts
/// such as `<start_of_turn>` are plain text unless --special is given.
///
/// Examples:
///   statelm tokenize "The capital of France is"
///   statelm tokenize -m qwen2.5-coder-0.5b --special "<|im_start|>user"
///   statelm tokenize --file notes.txt --no-bos --json
///   echo "from stdin" | statelm tokenize -
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct TokenizeArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// The text (`-`: read stdin).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    text: Option<String>,
    /// Read the text from a file (it must be UTF-8).
    #[arg(short, long)]
    file: Option<PathBuf>,
    /// Do not add the BOS/EOS tokens the model's metadata asks for.
    #[arg(long)]
    no_bos: bool,
    /// Parse special-token texts (e.g. `<|im_start|>`) as those tokens.
    #[arg(long)]
    special: bool,
    /// Print `{"ids": [...], "count": N}`.
    #[arg(long)]
    json: bool,
}

/// Bytes as UTF-8 text, or an error naming the source and the first bad byte.
fn utf8(bytes: Vec<u8>, what: &str) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        anyhow::anyhow!("{what} is not valid UTF-8 (invalid byte at offset {at})")
    })
}

fn read_text(args: &TokenizeArgs) -> Result<String> {
    match (&args.file, args.text.as_deref()) {
        (Some(f), _) => {
            let bytes = std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
            utf8(bytes, &f.display().to_string())
        }
        (None, Some("-")) => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("cannot read stdin")?;
            utf8(bytes, "stdin")
        }
        (None, Some(t)) => Ok(t.to_string()),
        (None, None) => bail!("give a TEXT or --file"),
    }
}

/// Loads only the tokenizer of a model.
pub(crate) fn load_tokenizer(ctx: &Ctx, arg: Option<&str>, quiet: bool) -> Result<Tokenizer> {
    let path = ctx.model_path(arg, quiet)?;
    let file = GgufFile::open(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Tokenizer::from_gguf(&file)
        .with_context(|| format!("cannot read the tokenizer of {}", path.display()))
}

/// Runs the command.
pub fn run(args: &TokenizeArgs, ctx: &Ctx) -> Result<()> {
    let text = read_text(args)?;
    let tok = load_tokenizer(ctx, args.model.as_deref(), args.json)?;
    let ids = tok
        .encode(&text, !args.no_bos, args.special)
        .context("cannot tokenize the text")?;
    if args.json {
        println!("{}", json!({"ids": ids, "count": ids.len()}));
        return Ok(());
    }
    for &id in &ids {
        let piece = tok.token_bytes(id).unwrap_or_default();
        println!("{id:>7}  {:?}", String::from_utf8_lossy(piece));
    }
    eprintln!("{} tokens", ids.len());
    Ok(())
}
