//! Opening model files from disk (std): a Hugging Face folder (`config.json` +
//! `model.safetensors`, or shards listed in `model.safetensors.index.json`), a GGUF file or a
//! single safetensors file, memory-mapped with `memmap2` and validated by the parsers in
//! [`crate::format`].
//!
//! The container is chosen by content, not by name: a file that starts with the GGUF magic is
//! GGUF, a file whose 8-byte length prefix is followed by `{` is safetensors, a folder is a
//! Hugging Face folder. [`Container`] opens any of them for their tensors alone (what
//! `rml inspect` lists, even without a `config.json` or for an architecture rml does not
//! run); [`Model`] adds the [`ModelConfig`] rml runs with and needs one.
//!
//! Every check happens at open: an empty or truncated file, a header that lies, a tensor
//! whose data runs past the end of its file, a shard the index names but that is missing —
//! all are [`Error`]s from [`Model::open`], so later reads of the mapping stay inside the
//! file. Weights are never copied: [`Container::tensor`] returns views into the mappings.
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

pub use crate::model::arch::ModelFormat;

/// What the first bytes of a file say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// Starts with the GGUF magic `"GGUF"`.
    Gguf,
    /// An 8-byte little-endian header length followed by `{` (a safetensors JSON header).
    Safetensors,
    /// Neither.
    Unknown,
}

/// Tells GGUF from safetensors by the first bytes of a file (see [`Sniffed`]).
pub fn sniff(head: &[u8]) -> Sniffed {
    if head.starts_with(&crate::format::gguf::MAGIC) {
        Sniffed::Gguf
    } else if head.len() > 8 && head[8] == b'{' {
        Sniffed::Safetensors
    } else {
        Sniffed::Unknown
    }
}

/// One mapped file.
struct Mapped {
    path: PathBuf,
    map: Mmap,
}

/// A model opened from disk: its configuration and its tensors, memory-mapped and validated.
///
/// Tensor names are the file's own (`model.layers.0.self_attn.q_proj.weight` for
/// safetensors, `blk.0.attn_q.weight` for GGUF; see [`crate::model::arch::ArchSpec::map_name`]
/// and the q/k row-order note in [`crate::model::arch::llama`]). `&Model` implements
/// [`TensorSource`]; every [`Container`] method is available through `Deref`.
pub struct Model {
    container: Container,
    config: ModelConfig,
}

impl core::ops::Deref for Model {
    type Target = Container;

    fn deref(&self) -> &Container {
        &self.container
    }
}

impl core::fmt::Debug for Model {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Model").field("container", &self.container).finish()
    }
}

/// Model files opened for their tensors alone: a GGUF file, a safetensors file, or a Hugging
/// Face folder (one file or shards), mapped and validated, with no [`ModelConfig`] required.
pub struct Container {
    format: ModelFormat,
    path: PathBuf,
    /// A single safetensors file (not a folder).
    bare: bool,
    files: Vec<Mapped>,
    /// Directory entries; offsets are absolute in `files[file_of[i]]`.
    tensors: Vec<TensorInfo>,
    file_of: Vec<usize>,
    index: HashMap<String, usize>,
    st_metadata: Vec<(String, String)>,
}

impl core::fmt::Debug for Container {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Container")
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
    /// Opens a model rml can run, choosing the container by content: a folder is a Hugging
    /// Face folder ([`Model::open_hf_dir`]); a file with the GGUF magic is GGUF
    /// ([`Model::open_gguf`]); a bare safetensors file is refused, naming the folder with
    /// `config.json` it needs.
    ///
    /// # Errors
    ///
    /// See [`Model::open_hf_dir`] and [`Model::open_gguf`]; [`crate::Code::InvalidArgument`]
    /// for a single safetensors file (weights without a `config.json`);
    /// [`crate::Code::DataLoss`] for a file that is neither GGUF nor safetensors.
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        if path.is_dir() {
            return Model::open_hf_dir(path);
        }
        let mapped = map_file(path)?;
        match sniff(&mapped.map) {
            Sniffed::Safetensors => Err(bare_safetensors_error(path)),
            _ => Model::from_gguf(mapped),
        }
    }

    /// Opens a GGUF file and builds its [`ModelConfig`] from the `llama.*` metadata.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Io`] if the file cannot be read; [`crate::Code::InvalidArgument`] if it
    /// is not a regular file (a FIFO, a device); [`crate::Code::DataLoss`] for an empty or
    /// malformed file (see [`Gguf::parse`]); the errors of [`from_gguf`]. Every
    /// message starts with the path.
    pub fn open_gguf(path: impl AsRef<Path>) -> Result<Model> {
        Model::from_gguf(map_file(path.as_ref())?)
    }

    fn from_gguf(mapped: Mapped) -> Result<Model> {
        let container = Container::from_gguf(mapped)?;
        let config = container.model_config()?;
        Ok(Model { container, config })
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
        if !dir.join("config.json").is_file() {
            return Err(Error::not_found(format_args!("{}: no config.json", dir.display())));
        }
        let container = Container::open_hf_dir(dir)?;
        let config = container.model_config()?;
        Ok(Model { container, config })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The files and tensors without the configuration.
    pub fn container(&self) -> &Container {
        &self.container
    }
}

/// The error for running a single safetensors file: it holds weights but no configuration.
fn bare_safetensors_error(path: &Path) -> Error {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let hint = if dir.join("config.json").is_file() {
        format!("give the folder instead: {}", dir.display())
    } else {
        format!("there is no config.json beside it in {}", dir.display())
    };
    Error::invalid_argument(format_args!(
        "{}: a single safetensors file holds weights only; rml runs a Hugging Face folder with \
         config.json (and tokenizer.json) beside the weights: {hint}",
        path.display()
    ))
}

impl Container {
    /// Opens whatever `path` holds, by content: a folder (Hugging Face layout; `config.json`
    /// not required), a GGUF file, or a single safetensors file.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Io`] if a file cannot be read; [`crate::Code::InvalidArgument`] for a
    /// special file; [`crate::Code::DataLoss`] for an empty or malformed file, or one that is
    /// neither GGUF nor safetensors; [`crate::Code::NotFound`] for a folder without weights.
    pub fn open(path: impl AsRef<Path>) -> Result<Container> {
        let path = path.as_ref();
        if path.is_dir() {
            return Container::open_hf_dir(path);
        }
        let mapped = map_file(path)?;
        match sniff(&mapped.map) {
            Sniffed::Gguf => Container::from_gguf(mapped),
            Sniffed::Safetensors => Container::from_safetensors_files(
                path,
                true,
                alloc::vec![String::new()],
                alloc::vec![mapped],
                None,
            ),
            Sniffed::Unknown => {
                let head: Vec<String> =
                    mapped.map.iter().take(8).map(|b| format!("{b:02x}")).collect();
                Err(Error::data_loss(format_args!(
                    "{}: neither a GGUF file (no \"GGUF\" magic) nor a safetensors file (no \
                     JSON header after the 8-byte length); first bytes {}",
                    path.display(),
                    head.join(" ")
                )))
            }
        }
    }

    fn from_gguf(mapped: Mapped) -> Result<Container> {
        let path = mapped.path.clone();
        let tensors =
            Gguf::parse(&mapped.map).map_err(|e| e.context(path.display()))?.infos().to_vec();
        let file_of = alloc::vec![0; tensors.len()];
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(Container {
            format: ModelFormat::Gguf,
            path,
            bare: false,
            files: alloc::vec![mapped],
            tensors,
            file_of,
            index,
            st_metadata: Vec::new(),
        })
    }

    /// Opens the weights of a Hugging Face folder (`model.safetensors` or the shards of
    /// `model.safetensors.index.json`); `config.json` is not read.
    fn open_hf_dir(dir: &Path) -> Result<Container> {
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
        for shard in &shards {
            files.push(map_file(&dir.join(shard))?);
        }
        let weight_map = weight_map.map(|wm| (index_path, wm));
        Container::from_safetensors_files(dir, false, shards, files, weight_map)
    }

    /// Indexes the tensors of mapped safetensors `files` (named `shards` inside `path`, or the
    /// one file `path` itself when `bare`), checking them against an index's weight map.
    fn from_safetensors_files(
        path: &Path,
        bare: bool,
        shards: Vec<String>,
        files: Vec<Mapped>,
        weight_map: Option<(PathBuf, Vec<(String, String)>)>,
    ) -> Result<Container> {
        let mut tensors = Vec::new();
        let mut file_of = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut st_metadata = Vec::new();
        for (fi, mapped) in files.iter().enumerate() {
            let p = &mapped.path;
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
        if let Some((index_path, wm)) = weight_map {
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
        Ok(Container {
            format: ModelFormat::Safetensors,
            path: path.to_path_buf(),
            bare,
            files,
            tensors,
            file_of,
            index,
            st_metadata,
        })
    }

    /// The configuration rml would run this model with: from the GGUF metadata, or from the
    /// folder's `config.json`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::NotFound`] for a folder without `config.json`;
    /// [`crate::Code::InvalidArgument`] for a single safetensors file (see [`Model::open`]);
    /// the errors of [`from_gguf`] and [`parse_config`] (an architecture rml does not
    /// run is [`crate::Code::Unimplemented`]). Every message names the file.
    pub fn model_config(&self) -> Result<ModelConfig> {
        let ctx = |e: Error| e.context(self.path.display());
        match self.format {
            ModelFormat::Gguf => {
                let g = Gguf::parse(&self.files[0].map).map_err(ctx)?;
                from_gguf(&g).map_err(ctx)
            }
            ModelFormat::Safetensors if self.bare => Err(bare_safetensors_error(&self.path)),
            ModelFormat::Safetensors => {
                let config_path = self.path.join("config.json");
                if !config_path.is_file() {
                    return Err(Error::not_found(format_args!(
                        "{}: no config.json",
                        self.path.display()
                    )));
                }
                parse_config(&read_text(&config_path, MAX_CONFIG_BYTES)?)
                    .map_err(|e| e.context(config_path.display()))
            }
        }
    }

    /// The format the files are in.
    pub fn format(&self) -> ModelFormat {
        self.format
    }

    /// `true` for a single safetensors file opened on its own (no folder around it).
    pub fn is_bare_file(&self) -> bool {
        self.bare
    }

    /// The path it was opened from (folder or file).
    pub fn path(&self) -> &Path {
        &self.path
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
    /// As [`Container::gguf`].
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

impl<'m> PackedSource<'m> {
    /// A [`PackedSource`] over `model`'s files, with the packing marks of its `__metadata__`
    /// (none for GGUF).
    ///
    /// # Errors
    ///
    /// As [`PackedSource::from_marks`].
    pub fn new(model: &'m Container) -> Result<Self> {
        let stored = |name: &str| -> Result<(crate::tensor::Shape, &'m [u8])> {
            let i = *model.index.get(name).ok_or_else(|| {
                Error::not_found(format_args!("tensor {name:?} is not in the model"))
            })?;
            Ok((model.tensors[i].shape, model.raw_bytes(name)?))
        };
        PackedSource::from_marks(Box::new(model), model.safetensors_metadata(), &stored)
    }
}

impl<'a> TensorSource<'a> for &'a Container {
    fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        Container::tensor(self, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }
}

impl<'a> TensorSource<'a> for &'a Model {
    fn tensor(&self, name: &str) -> Result<TensorView<'a>> {
        Container::tensor(&self.container, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.container.tensors.iter().map(|t| t.name.as_str()).collect()
    }
}

/// Reads `weight_map` from a `model.safetensors.index.json` (Hugging Face's sharded layout):
/// (tensor, shard file name) pairs, in the JSON object's order.
///
/// # Errors
///
/// [`crate::Code::DataLoss`] for text that is not JSON, no `weight_map` object, a shard that
/// is not a string, or a shard name that is not a plain file name (a path, `.` or `..`).
pub fn parse_index(text: &str) -> Result<Vec<(String, String)>> {
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
