//! Opening model files from disk (std): a Hugging Face folder (`config.json` +
//! `model.safetensors`, or shards listed in `model.safetensors.index.json`) or a `.gguf`
//! file, memory-mapped with `memmap2` and validated by the parsers in [`crate::format`].
//!
//! Every check happens at open: an empty or truncated file, a header that lies, a tensor
//! whose data runs past the end of its file, a shard the index names but that is missing —
//! all are [`Error`]s from [`Model::open`], so later reads of the mapping stay inside the
//! file. Weights are never copied: [`Model::tensor`] returns views into the mappings.
//!
//! A memory map reflects the file as it is on disk: if another process truncates or rewrites
//! a model file while it is open, reads may fault (SIGBUS) or see the new bytes. rml never
//! writes to model files; keep them unchanged while a [`Model`] is alive.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use std::fs::File;
use std::path::{Path, PathBuf};

use hashbrown::HashMap;
use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::format::gguf::Gguf;
use crate::format::safetensors::SafeTensors;
use crate::format::{TensorInfo, TensorSource, TensorView};
use crate::model::config::{from_gguf, parse_config, ModelConfig, MAX_CONFIG_BYTES};
use crate::model::packed::PackedSource;

/// Which on-disk format a [`Model`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    /// A Hugging Face folder with safetensors weights (one file or shards).
    Safetensors,
    /// A GGUF file.
    Gguf,
}

/// One mapped file.
struct Mapped {
    path: PathBuf,
    map: Mmap,
}

/// A model opened from disk: its configuration and its tensors, memory-mapped and validated.
///
/// Tensor names are the file's own (`model.layers.0.self_attn.q_proj.weight` for
/// safetensors, `blk.0.attn_q.weight` for GGUF; see [`crate::model::arch::llama::hf_tensor_name`]
/// and the q/k row-order note in [`crate::model::arch::llama`]). `&Model` implements
/// [`TensorSource`].
pub struct Model {
    format: ModelFormat,
    path: PathBuf,
    config: ModelConfig,
    files: Vec<Mapped>,
    /// Directory entries; offsets are absolute in `files[file_of[i]]`.
    tensors: Vec<TensorInfo>,
    file_of: Vec<usize>,
    index: HashMap<String, usize>,
    st_metadata: Vec<(String, String)>,
}

impl core::fmt::Debug for Model {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Model")
            .field("format", &self.format)
            .field("path", &self.path)
            .field("files", &self.files.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Maps `path` read-only, refusing an empty file and anything but a regular file.
fn map_file(path: &Path) -> Result<Mapped> {
    let ctx = |e: Error| e.context(path.display());
    // Checked before opening: opening a FIFO for reading blocks until a writer appears, and a
    // directory or device cannot be a model file.
    if !std::fs::metadata(path).map_err(|e| ctx(e.into()))?.is_file() {
        return Err(ctx(Error::invalid_argument("not a regular file")));
    }
    let file = File::open(path).map_err(|e| ctx(e.into()))?;
    let len = file.metadata().map_err(|e| ctx(e.into()))?.len();
    if len == 0 {
        return Err(ctx(Error::data_loss("file is empty")));
    }
    // SAFETY: the mapping is read-only and private to this process; the length comes from
    // the open file. The module documents the remaining hazard of mappings: another process
    // truncating or rewriting the file while it is mapped.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| ctx(e.into()))?;
    if map.len() as u64 != len {
        return Err(ctx(Error::data_loss(format_args!(
            "mapped {} bytes of a {len}-byte file",
            map.len()
        ))));
    }
    Ok(Mapped { path: path.to_path_buf(), map })
}

fn read_text(path: &Path, limit: usize) -> Result<String> {
    let ctx = |e: Error| e.context(path.display());
    let len = std::fs::metadata(path).map_err(|e| ctx(e.into()))?.len();
    if len > limit as u64 {
        return Err(ctx(Error::resource_exhausted(format_args!(
            "{len} bytes is above the limit of {limit}"
        ))));
    }
    let bytes = std::fs::read(path).map_err(|e| ctx(e.into()))?;
    String::from_utf8(bytes).map_err(|e| ctx(Error::data_loss(format_args!("not UTF-8: {e}"))))
}

impl Model {
    /// Opens a Hugging Face folder (a directory) or a GGUF file (anything else).
    ///
    /// # Errors
    ///
    /// See [`Model::open_hf_dir`] and [`Model::open_gguf`].
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        if path.is_dir() {
            Model::open_hf_dir(path)
        } else {
            Model::open_gguf(path)
        }
    }

    /// Opens a GGUF file and builds its [`ModelConfig`] from its architecture's metadata
    /// ([`from_gguf`]).
    ///
    /// # Errors
    ///
    /// [`crate::Code::Io`] if the file cannot be read; [`crate::Code::InvalidArgument`] if it
    /// is not a regular file (a FIFO, a device); [`crate::Code::DataLoss`] for an empty or
    /// malformed file (see [`Gguf::parse`]); the errors of [`from_gguf`]. Every
    /// message starts with the path.
    pub fn open_gguf(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let mapped = map_file(path)?;
        let (config, tensors) = {
            let g = Gguf::parse(&mapped.map).map_err(|e| e.context(path.display()))?;
            let config = from_gguf(&g).map_err(|e| e.context(path.display()))?;
            (config, g.infos().to_vec())
        };
        let file_of = alloc::vec![0; tensors.len()];
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(Model {
            format: ModelFormat::Gguf,
            path: path.to_path_buf(),
            config,
            files: alloc::vec![mapped],
            tensors,
            file_of,
            index,
            st_metadata: Vec::new(),
        })
    }

    /// Opens a Hugging Face folder: `config.json` and either `model.safetensors` or
    /// `model.safetensors.index.json` with the shards its `weight_map` names (plain file
    /// names inside the folder).
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] if `config.json` or the weights are missing;
    /// [`crate::Code::Io`] for unreadable files; [`crate::Code::InvalidArgument`] for a shard
    /// that is not a regular file; [`crate::Code::DataLoss`] for a malformed
    /// config, index or shard, a shard name with a path in it, a tensor in two shards, or an
    /// index entry whose tensor is not in the shard it names; the errors of
    /// [`parse_config`]. Every message names the file.
    pub fn open_hf_dir(dir: impl AsRef<Path>) -> Result<Model> {
        let dir = dir.as_ref();
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(Error::not_found(format_args!("{}: no config.json", dir.display())));
        }
        let config = parse_config(&read_text(&config_path, MAX_CONFIG_BYTES)?)
            .map_err(|e| e.context(config_path.display()))?;

        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let (shards, weight_map): (Vec<String>, Option<Vec<(String, String)>>) = if single.is_file()
        {
            (alloc::vec![String::from("model.safetensors")], None)
        } else if index_path.is_file() {
            let text = read_text(&index_path, 64 << 20)?;
            let wm = parse_index(&text).map_err(|e| e.context(index_path.display()))?;
            let mut shards: Vec<String> = wm.iter().map(|(_, f)| f.clone()).collect();
            shards.sort();
            shards.dedup();
            (shards, Some(wm))
        } else {
            return Err(Error::not_found(format_args!(
                "{}: neither model.safetensors nor model.safetensors.index.json",
                dir.display()
            )));
        };

        let mut files = Vec::with_capacity(shards.len());
        let mut tensors = Vec::new();
        let mut file_of = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut st_metadata = Vec::new();
        for (fi, shard) in shards.iter().enumerate() {
            let p = dir.join(shard);
            let mapped = map_file(&p)?;
            {
                let st = SafeTensors::parse(&mapped.map).map_err(|e| e.context(p.display()))?;
                if fi == 0 {
                    st_metadata = st.metadata().to_vec();
                }
                for info in st.infos() {
                    if index.insert(info.name.clone(), tensors.len()).is_some() {
                        return Err(Error::data_loss(format_args!(
                            "{}: tensor {:?} is also in another shard",
                            p.display(),
                            info.name
                        )));
                    }
                    tensors.push(info.clone());
                    file_of.push(fi);
                }
            }
            files.push(mapped);
        }
        if let Some(wm) = weight_map {
            for (tensor, shard) in &wm {
                let ok = index.get(tensor).is_some_and(|&i| shards[file_of[i]] == *shard);
                if !ok {
                    return Err(Error::data_loss(format_args!(
                        "{}: weight_map puts tensor {tensor:?} in {shard:?}, which does not hold it",
                        index_path.display()
                    )));
                }
            }
        }
        Ok(Model {
            format: ModelFormat::Safetensors,
            path: dir.to_path_buf(),
            config,
            files,
            tensors,
            file_of,
            index,
            st_metadata,
        })
    }

    /// The format the model came from.
    pub fn format(&self) -> ModelFormat {
        self.format
    }

    /// The path it was opened from (folder or file).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The mapped files (one for GGUF and unsharded safetensors).
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|f| f.path.as_path())
    }

    /// Every tensor's entry: name, dtype as stored, shape (outermost first), bytes, offset
    /// in its file. Shards are listed in file-name order, tensors in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`, borrowed from the mapping (no copy).
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] if absent, [`crate::Code::Unimplemented`] for a dtype rml
    /// does not compute with (named).
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let i = *self
            .index
            .get(name)
            .ok_or_else(|| Error::not_found(format_args!("tensor {name:?} is not in the model")))?;
        let t = &self.tensors[i];
        let dtype = t.dtype.supported(name)?;
        let data = &self.files[self.file_of[i]].map[t.offset..t.offset + t.bytes];
        Ok(TensorView { dtype, shape: t.shape, data })
    }

    /// The raw bytes of tensor `name`, whatever its dtype.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] if absent.
    pub fn raw_bytes(&self, name: &str) -> Result<&[u8]> {
        let i = *self
            .index
            .get(name)
            .ok_or_else(|| Error::not_found(format_args!("tensor {name:?} is not in the model")))?;
        let t = &self.tensors[i];
        Ok(&self.files[self.file_of[i]].map[t.offset..t.offset + t.bytes])
    }

    /// The GGUF view of the file (metadata, tokenizer, ...), or `None` for safetensors.
    /// Parses the header again (about a millisecond for a 50k-token vocabulary); the file was
    /// validated at open.
    ///
    /// # Errors
    ///
    /// Only if the file changed on disk since it was opened (see the module docs).
    pub fn gguf(&self) -> Option<Result<Gguf<'_>>> {
        match self.format {
            ModelFormat::Gguf => Some(Gguf::parse(&self.files[0].map)),
            ModelFormat::Safetensors => None,
        }
    }

    /// The safetensors `__metadata__` of the (first) weights file; empty for GGUF.
    pub fn safetensors_metadata(&self) -> &[(String, String)] {
        &self.st_metadata
    }

    /// Metadata for listing (`rml inspect`): for GGUF every key with its type and value
    /// (long strings and arrays abbreviated, see [`crate::format::gguf::MetaValue`]'s
    /// `Display`); for safetensors the `__metadata__` entries.
    ///
    /// # Errors
    ///
    /// As [`Model::gguf`].
    pub fn metadata_listing(&self) -> Result<Vec<(String, String)>> {
        match self.gguf() {
            Some(g) => Ok(g?
                .metadata()
                .iter()
                .map(|(k, v)| (k.to_string(), format!("{}: {v}", v.meta_type().name())))
                .collect()),
            None => Ok(self.st_metadata.clone()),
        }
    }
}

impl<'a> TensorSource<'a> for &'a Model {
    fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        Model::tensor(self, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }
}

impl<'m> PackedSource<'m> {
    /// A [`PackedSource`] over `model`, with the packing marks of its `__metadata__` (none for
    /// GGUF).
    ///
    /// # Errors
    ///
    /// As [`PackedSource::from_marks`].
    pub fn new(model: &'m Model) -> Result<Self> {
        let stored = |name: &str| -> Result<(crate::tensor::Shape, &'m [u8])> {
            let i = *model.index.get(name).ok_or_else(|| {
                Error::not_found(format_args!("tensor {name:?} is not in the model"))
            })?;
            Ok((model.tensors[i].shape, model.raw_bytes(name)?))
        };
        PackedSource::from_marks(Box::new(model), model.safetensors_metadata(), &stored)
    }
}

/// Reads `weight_map` from a `model.safetensors.index.json`: (tensor, shard file name) pairs.
fn parse_index(text: &str) -> Result<Vec<(String, String)>> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Error::data_loss(format_args!("not valid JSON: {e}")))?;
    let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(Error::data_loss("no \"weight_map\" object"));
    };
    let mut out = Vec::with_capacity(map.len());
    for (tensor, file) in map {
        let Some(file) = file.as_str() else {
            return Err(Error::data_loss(format_args!(
                "weight_map: tensor {tensor:?}: shard is not a string"
            )));
        };
        let plain = Path::new(file).file_name().is_some_and(|n| n == file)
            && !file.contains(['/', '\\'])
            && file != ".."
            && file != ".";
        if !plain {
            return Err(Error::data_loss(format_args!(
                "weight_map: tensor {tensor:?}: shard {file:?} is not a plain file name"
            )));
        }
        out.push((tensor.clone(), String::from(file)));
    }
    Ok(out)
}
