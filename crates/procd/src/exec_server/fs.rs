//! `fs/*`: the file calls Codex's file tools and apply_patch make, on
//! this machine, with the errors Codex's own server gives (a missing
//! path is -32004). Off the event loop: a file may be large or slow.

use super::{params, path_of, uri_of, RpcError};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use procd_sys::sandbox::Rules;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PathParams {
    path: String,
    #[serde(default)]
    sandbox: Option<Value>,
    #[serde(default)]
    recursive: Option<bool>,
    #[serde(default)]
    force: Option<bool>,
    #[serde(default)]
    data_base64: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CopyParams {
    source_path: String,
    destination_path: String,
    recursive: bool,
    #[serde(default)]
    sandbox: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WalkParams {
    path: String,
    options: WalkOptions,
    #[serde(default)]
    sandbox: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WalkOptions {
    /// Directories this far below the root's children are not read.
    max_depth: usize,
    /// Directories read, the root included.
    max_directories: usize,
    max_entries: usize,
    follow_directory_symlinks: bool,
}

/// The most entries one walk returns, whatever is asked: the answer is
/// held in memory (then `truncated`).
const MAX_WALK_ENTRIES: usize = 200_000;

/// An I/O error in Codex's shape: a missing path is -32004.
impl From<std::io::Error> for RpcError {
    fn from(e: std::io::Error) -> RpcError {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            -32004
        } else {
            -32603
        };
        RpcError::new(code, e.to_string())
    }
}

/// The confinement of a call made under Codex's sandbox intent, if one
/// was sent; refused with the reason when procd cannot give it exactly.
fn confinement(sandbox: &Option<Value>) -> Result<Option<Rules>, RpcError> {
    match sandbox {
        Some(s) if !s.is_null() => super::sandbox::confinement(s)
            .map(Some)
            .map_err(RpcError::invalid),
        _ => Ok(None),
    }
}

pub async fn call(method: &str, p: Value) -> Result<Value, RpcError> {
    let method = method.to_string();
    if method == "fs/copy" {
        let p: CopyParams = params(p)?;
        let confine = confinement(&p.sandbox)?;
        let (from, to) = (path_of(&p.source_path)?, path_of(&p.destination_path)?);
        return blocking(confine, move || copy(&from, &to, p.recursive))
            .await
            .map(|()| json!({}));
    }
    if method == "fs/walk" {
        let p: WalkParams = params(p)?;
        let confine = confinement(&p.sandbox)?;
        let root = path_of(&p.path)?;
        return blocking(confine, move || walk(&root, &p.options)).await;
    }
    let p: PathParams = params(p)?;
    let confine = confinement(&p.sandbox)?;
    let path = path_of(&p.path)?;
    let base64 = &base64::engine::general_purpose::STANDARD;
    match method.as_str() {
        "fs/readFile" => {
            let data = blocking(confine, move || read_whole(&path)).await?;
            return Ok(json!({"dataBase64": base64.encode(data)}));
        }
        "fs/writeFile" => {
            // Checked before anything is opened (an open truncates).
            let Some(text) = &p.data_base64 else {
                return Err(RpcError::invalid("missing field `dataBase64`"));
            };
            let data = base64.decode(text).map_err(|e| {
                let why = format!("fs/writeFile requires valid base64 dataBase64: {e}");
                RpcError::new(-32600, why)
            })?;
            return blocking(confine, move || write_whole(&path, &data))
                .await
                .map(|()| json!({}));
        }
        _ => {}
    }
    blocking(confine, move || -> Result<Value, RpcError> {
        Ok(match method.as_str() {
            // Without `recursive`, as Codex's server does: parents made, a
            // tree removed, a missing path no error.
            "fs/createDirectory" => {
                match p.recursive.unwrap_or(true) {
                    true => std::fs::create_dir_all(&path)?,
                    false => std::fs::create_dir(&path)?,
                }
                json!({})
            }
            "fs/getMetadata" => metadata(&path)?,
            "fs/canonicalize" => json!({"path": uri_of(&std::fs::canonicalize(&path)?)}),
            "fs/readDirectory" => read_directory(&path)?,
            "fs/remove" => {
                remove(&path, p.recursive.unwrap_or(true), p.force.unwrap_or(true))?;
                json!({})
            }
            other => {
                let why = format!("procd exec-server does not implement `{other}`");
                return Err(RpcError::new(-32601, why));
            }
        })
    })
    .await
}

/// How much a call may carry (`super::LARGE_AT_ONCE`).
#[derive(Clone, Copy)]
pub enum Weight {
    /// Its message and answer are small.
    Small,
    /// Its message carries a file's bytes (`fs/writeFile`).
    LargeMessage,
    /// Its answer may carry a file's bytes or a listing as large.
    LargeAnswer,
}

/// The `Weight` of `method`.
pub fn weight(method: &str) -> Weight {
    match method {
        "fs/writeFile" => Weight::LargeMessage,
        "fs/readFile" | "fs/readDirectory" | "fs/walk" => Weight::LargeAnswer,
        _ => Weight::Small,
    }
}

/// The largest file `fs/readFile` answers with: as large as the line that
/// may carry one to `fs/writeFile`. Codex's own server reads any file
/// whole (about four times its size in memory at the peak), and a
/// device that never ends, `/dev/zero`, until it is killed.
const MAX_READ_FILE: u64 = 64 << 20;

/// A file's bytes, if there are at most `MAX_READ_FILE` of them.
fn read_whole(path: &Path) -> Result<Vec<u8>, RpcError> {
    use std::io::Read;
    let mut data = Vec::new();
    open_file(path)?
        .take(MAX_READ_FILE + 1)
        .read_to_end(&mut data)?;
    if data.len() as u64 > MAX_READ_FILE {
        return Err(RpcError::new(
            -32600,
            format!(
                "{} holds more than {} MiB: read it in blocks (fs/open, fs/readBlock)",
                path.display(),
                MAX_READ_FILE >> 20
            ),
        ));
    }
    Ok(data)
}

/// Files are opened with it: the open of a FIFO waits for the other end,
/// maybe for ever, where this one returns at once.
const NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;

/// `path` opened for reading if it is a regular file; anything else is
/// Codex's -32600 "is not a file". Opened without blocking, so that a
/// FIFO (whose open waits for a writer, maybe for ever) is refused at
/// once, whatever the path became between a look and the open.
fn open_file(path: &Path) -> Result<std::fs::File, RpcError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(NONBLOCK)
        .open(path)?;
    match file.metadata()?.is_file() {
        // Reads of a regular file never wait, non-blocking or not.
        true => Ok(file),
        false => Err(RpcError::new(
            -32600,
            format!("path `{}` is not a file", path.display()),
        )),
    }
}

/// `data` as the whole of the file at `path`, made if missing, as
/// `std::fs::write`, but opened without blocking: the open of a FIFO
/// that nothing reads waits for a reader, maybe for ever (Codex's own
/// server waits, and answers nothing more); here it is an error.
fn write_whole(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(NONBLOCK)
        .open(path);
    match opened {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => {
            Err(std::io::Error::other(format!(
                "path `{}` is a FIFO that nothing reads",
                path.display()
            )))
        }
        // Writes to a regular file never wait, non-blocking or not.
        opened => opened?.write_all(data),
    }
}

/// Runs `f` off the event loop: on the blocking pool, or, confined, on a
/// thread of its own that the confinement ends with (a pool thread would
/// carry it into the next call).
async fn blocking<T: Send + 'static, E: Into<RpcError> + Send + 'static>(
    confine: Option<Rules>,
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, RpcError> {
    let Some(rules) = confine else {
        return match tokio::task::spawn_blocking(f).await {
            Ok(r) => r.map_err(Into::into),
            Err(e) => Err(RpcError::internal(e.to_string())),
        };
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("fs-confined".into())
        .spawn(move || {
            let r = match procd_sys::sandbox::confine_this_thread(&rules) {
                Ok(()) => f().map_err(Into::into),
                Err(e) => Err(RpcError::new(-32002, e.to_string())),
            };
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        return Err(RpcError::internal(e.to_string()));
    }
    rx.await
        .unwrap_or_else(|_| Err(RpcError::internal("the confined file call ended")))
}

fn millis(t: std::io::Result<std::time::SystemTime>) -> i64 {
    t.ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

fn metadata(path: &Path) -> std::io::Result<Value> {
    let link = std::fs::symlink_metadata(path)?;
    let m = std::fs::metadata(path).unwrap_or(link.clone());
    Ok(json!({
        "isDirectory": m.is_dir(),
        "isFile": m.is_file(),
        "isSymlink": link.file_type().is_symlink(),
        "size": m.len(),
        "createdAtMs": millis(m.created()),
        "modifiedAtMs": millis(m.modified()),
    }))
}

/// The most entries `fs/readDirectory` answers with: as many as a walk
/// returns. The answer is held in memory, about 100 bytes an entry.
const MAX_DIRECTORY_ENTRIES: usize = MAX_WALK_ENTRIES;

/// `fs/readDirectory`: each entry as what it leads to. One that leads
/// nowhere (a dangling symlink) is left out, as Codex's server leaves it.
/// A directory of more than `MAX_DIRECTORY_ENTRIES` is an error that
/// says to walk it (Codex's server answers every entry).
fn read_directory(path: &Path) -> Result<Value, RpcError> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(path)? {
        let e = e?;
        if entries.len() == MAX_DIRECTORY_ENTRIES {
            let why = format!(
                "{} holds more than {MAX_DIRECTORY_ENTRIES} entries: list it with fs/walk and maxEntries",
                path.display()
            );
            return Err(RpcError::new(-32600, why));
        }
        let Ok(m) = std::fs::metadata(e.path()) else {
            continue;
        };
        entries.push(json!({
            "fileName": e.file_name().to_string_lossy(),
            "isDirectory": m.is_dir(),
            "isFile": m.is_file(),
        }));
    }
    Ok(json!({"entries": entries}))
}

/// `fs/walk`, as Codex's server walks: breadth first, each directory's
/// entries in byte order of their names, files and directories only
/// (a symlink only when followed, and only to a directory, which is read
/// once whatever the path to it); a directory that cannot be read is an
/// `errors` entry, and a limit reached makes the answer `truncated`.
fn walk(root: &Path, o: &WalkOptions) -> std::io::Result<Value> {
    use std::os::unix::fs::MetadataExt;
    let top = std::fs::metadata(root)?;
    let (mut entries, mut errors, mut truncated) = (Vec::new(), Vec::new(), false);
    let max_entries = o.max_entries.min(MAX_WALK_ENTRIES);
    let mut seen = std::collections::HashSet::from([(top.dev(), top.ino())]);
    let mut queue = std::collections::VecDeque::new();
    if top.is_dir() {
        queue.push_back((root.to_path_buf(), 0usize));
    }
    let mut read = 0usize;
    'dirs: while let Some((dir, level)) = queue.pop_front() {
        if read >= o.max_directories {
            truncated = true;
            break;
        }
        read += 1;
        let mut children: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(list) => list.filter_map(Result::ok).map(|e| e.path()).collect(),
            Err(e) => {
                errors.push(json!({"path": uri_of(&dir), "message": e.to_string()}));
                continue;
            }
        };
        children.sort_by(|a, b| {
            use std::os::unix::ffi::OsStrExt;
            let name = |p: &PathBuf| p.file_name().map(|n| n.as_bytes().to_vec());
            name(a).cmp(&name(b))
        });
        for child in children {
            let Ok(link) = std::fs::symlink_metadata(&child) else {
                continue;
            };
            let meta = if link.file_type().is_symlink() {
                match std::fs::metadata(&child) {
                    Ok(m) if o.follow_directory_symlinks && m.is_dir() => m,
                    _ => continue,
                }
            } else {
                link
            };
            let kind = if meta.is_dir() {
                "directory"
            } else if meta.is_file() {
                "file"
            } else {
                continue;
            };
            if entries.len() >= max_entries {
                truncated = true;
                break 'dirs;
            }
            entries.push(json!({"path": uri_of(&child), "kind": kind}));
            if meta.is_dir() && level < o.max_depth && seen.insert((meta.dev(), meta.ino())) {
                queue.push_back((child, level + 1));
            }
        }
    }
    Ok(json!({"entries": entries, "errors": errors, "truncated": truncated}))
}

/// `fs/remove`. A tree is never removed when it is the root directory,
/// however `path` names it (`/`, `/tmp/..`, a link to it with a trailing
/// slash, a bind mount of it): `rm -r` refuses it so without
/// `--no-preserve-root`, where Codex's own server would go on until an
/// error stopped it.
fn remove(path: &Path, recursive: bool, force: bool) -> Result<(), RpcError> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() && recursive => {
            if is_root_dir(path) {
                return Err(RpcError::new(
                    -32600,
                    format!(
                        "fs/remove refuses to remove `{}`: it is `/` (as rm refuses without --no-preserve-root)",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_dir_all(path)
        }
        Ok(m) if m.is_dir() => std::fs::remove_dir(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if force && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other.map_err(RpcError::from),
    }
}

/// Whether `path` names the root directory: the same device and inode,
/// as `rm --preserve-root` tells.
fn is_root_dir(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), std::fs::metadata("/")) {
        (Ok(at), Ok(root)) => at.dev() == root.dev() && at.ino() == root.ino(),
        _ => false,
    }
}

/// `fs/copy`, as Codex's server copies: a directory with `recursive`,
/// whole; a symlink as a symlink; inside a directory, what is neither a
/// file, a directory nor a symlink (a FIFO, a socket, a device) is left
/// out, and as the source it is refused. A directory into itself or one of
/// its descendants is refused before anything is made (it would copy until
/// the path grew too long). A file onto itself is left as it is: Codex's
/// server truncates it to nothing.
fn copy(from: &Path, to: &Path, recursive: bool) -> Result<(), RpcError> {
    let invalid = |what: &str| RpcError::new(-32600, format!("fs/copy {what}"));
    let kind = std::fs::symlink_metadata(from)?.file_type();
    if kind.is_dir() {
        if !recursive {
            return Err(invalid(
                "requires recursive: true when sourcePath is a directory",
            ));
        }
        let source = std::fs::canonicalize(from)?;
        if resolved(to)?.starts_with(&source) {
            return Err(invalid(
                "cannot copy a directory to itself or one of its descendants",
            ));
        }
        return copy_dir(from, to, 0);
    }
    if !(kind.is_file() || kind.is_symlink()) {
        return Err(invalid(
            "only supports regular files, directories, and symlinks",
        ));
    }
    Ok(copy_entry(from, to, kind)?)
}

/// How deep `fs/copy` goes: a bind mount of a directory inside itself
/// has no end.
const MAX_COPY_DEPTH: usize = 256;

fn copy_dir(from: &Path, to: &Path, depth: usize) -> Result<(), RpcError> {
    if depth > MAX_COPY_DEPTH {
        return Err(RpcError::new(
            -32600,
            format!("fs/copy goes at most {MAX_COPY_DEPTH} directories deep"),
        ));
    }
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let kind = e.file_type()?;
        let target = to.join(e.file_name());
        if kind.is_dir() {
            copy_dir(&e.path(), &target, depth + 1)?;
        } else if kind.is_file() || kind.is_symlink() {
            copy_entry(&e.path(), &target, kind)?;
        }
    }
    Ok(())
}

/// A file's bytes, or a symlink as itself.
fn copy_entry(from: &Path, to: &Path, kind: std::fs::FileType) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if kind.is_symlink() {
        return std::os::unix::fs::symlink(std::fs::read_link(from)?, to);
    }
    let same =
        |a: &std::fs::Metadata, b: &std::fs::Metadata| (a.dev(), a.ino()) == (b.dev(), b.ino());
    if let (Ok(a), Ok(b)) = (std::fs::metadata(from), std::fs::metadata(to)) {
        if same(&a, &b) {
            return Ok(());
        }
    }
    std::fs::copy(from, to).map(drop)
}

/// `path` with symlinks resolved as far as it exists, the rest as given.
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        match std::fs::canonicalize(at) {
            Ok(mut real) => {
                real.extend(rest.iter().rev());
                return Ok(real);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
                    return Err(e);
                };
                rest.push(name.to_owned());
                at = parent;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The most bytes one `fs/readBlock` returns, as Codex's server allows.
const MAX_BLOCK: usize = 1 << 20;
/// Files one connection may hold open (Codex closes what it opens; a
/// client that does not is refused more, not given every descriptor).
const MAX_HANDLES: usize = 256;

/// `fs/open`, `fs/readBlock`, `fs/close`: files held open by the client's
/// handle ids, for this connection.
#[derive(Default)]
pub struct Handles {
    open: Mutex<HashMap<String, Arc<std::fs::File>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OpenParams {
    handle_id: String,
    path: String,
    #[serde(default)]
    sandbox: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BlockParams {
    handle_id: String,
    offset: u64,
    len: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CloseParams {
    handle_id: String,
}

impl Handles {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<std::fs::File>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, id: &str) -> Result<Arc<std::fs::File>, RpcError> {
        self.table()
            .get(id)
            .cloned()
            .ok_or_else(|| RpcError::new(-32004, format!("unknown file handle `{id}`")))
    }

    /// Answers one of the three calls; None when `method` is another.
    pub async fn call(&self, method: &str, p: Value) -> Option<Result<Value, RpcError>> {
        Some(match method {
            "fs/open" => self.open(p).await,
            "fs/readBlock" => self.read_block(p).await,
            "fs/close" => params::<CloseParams>(p).map(|p| {
                self.table().remove(&p.handle_id);
                json!({})
            }),
            _ => return None,
        })
    }

    async fn open(&self, p: Value) -> Result<Value, RpcError> {
        let p: OpenParams = params(p)?;
        let confine = confinement(&p.sandbox)?;
        let path = path_of(&p.path)?;
        let taken = |id: &str| RpcError::new(-32600, format!("file handle `{id}` already exists"));
        if self.table().contains_key(&p.handle_id) {
            return Err(taken(&p.handle_id));
        }
        let file = blocking(confine, move || open_file(&path)).await?;
        let mut table = self.table();
        if table.contains_key(&p.handle_id) {
            return Err(taken(&p.handle_id));
        }
        if table.len() >= MAX_HANDLES {
            return Err(RpcError::new(
                -32600,
                format!("at most {MAX_HANDLES} files may be open at once: close one first"),
            ));
        }
        table.insert(p.handle_id.clone(), Arc::new(file));
        Ok(json!({"handleId": p.handle_id}))
    }

    async fn read_block(&self, p: Value) -> Result<Value, RpcError> {
        use std::os::unix::fs::FileExt;
        let p: BlockParams = params(p)?;
        if !(1..=MAX_BLOCK).contains(&p.len) {
            return Err(RpcError::new(
                -32600,
                format!("file read block length must be between 1 and {MAX_BLOCK}"),
            ));
        }
        let file = self.get(&p.handle_id)?;
        // The file was opened under any confinement asked; reading it needs none.
        blocking(None, move || {
            let mut buf = vec![0u8; p.len];
            let mut got = 0;
            // A short read is not the end; only a read of nothing is.
            while got < p.len {
                match file.read_at(&mut buf[got..], p.offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(got);
            Ok(json!({
                "chunk": base64::engine::general_purpose::STANDARD.encode(&buf),
                "eof": got < p.len,
            }))
        })
        .await
    }
}
