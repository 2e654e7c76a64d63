//! Finding a model's tokenizer: [`Tokenizer::for_model`] and [`Tokenizer::for_container`],
//! the one search the `rml` command line and the C ABI both use.

use std::path::{Path, PathBuf};

use super::Tokenizer;
use crate::error::{Error, Result};
use crate::load::Container;

impl Tokenizer {
    /// The tokenizer of the model at `path` (a GGUF file, a safetensors file or a Hugging Face
    /// folder, told apart by content as [`Container::open`] does); see
    /// [`Tokenizer::for_container`] for where it looks.
    ///
    /// # Errors
    ///
    /// Those of [`Container::open`] and [`Tokenizer::for_container`].
    pub fn for_model(path: impl AsRef<Path>) -> Result<Self> {
        Self::for_container(&Container::open(path)?)
    }

    /// The tokenizer of an opened model, looked for in this order:
    /// 1. `tokenizer.json` in a Hugging Face folder, or beside a single GGUF or safetensors
    ///    file (read with [`Tokenizer::from_file`], so `tokenizer_config.json` beside it
    ///    supplies BOS/EOS and the chat template);
    /// 2. for a GGUF file, the vocabulary stored in it ([`Tokenizer::from_gguf`]).
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] naming the `tokenizer.json` path looked for when neither
    /// exists (a safetensors model without one: safetensors holds no vocabulary);
    /// [`crate::Code::DataLoss`] / [`crate::Code::Unimplemented`] from the reader of the
    /// source found, with the file named.
    pub fn for_container(model: &Container) -> Result<Self> {
        let beside = tokenizer_json_path(model);
        if beside.is_file() {
            return Tokenizer::from_file(&beside);
        }
        match model.gguf() {
            Some(g) => Tokenizer::from_gguf(&g?).map_err(|e| e.context(model.path().display())),
            None => Err(Error::not_found(format_args!(
                "{}: no tokenizer: looked for {} (absent), and a safetensors model holds no \
                 vocabulary of its own",
                model.path().display(),
                beside.display()
            ))),
        }
    }
}

/// Where a model's `tokenizer.json` would be: inside its folder, or beside its file.
fn tokenizer_json_path(model: &Container) -> PathBuf {
    let path = model.path();
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.with_file_name("tokenizer.json")
    }
}
