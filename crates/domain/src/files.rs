//! Files and directories the program creates are its owner's alone: 0600 files and 0700
//! directories, whatever the umask (the database holds addresses and the ledger; an outbox holds
//! whole messages). Only creation sets the mode; an existing file keeps the one it has.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;

/// Mode of a file the program creates.
pub const FILE_MODE: u32 = 0o600;
/// Mode of a directory the program creates.
pub const DIR_MODE: u32 = 0o700;

/// `OpenOptions` whose `create` makes the file with [`FILE_MODE`].
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(FILE_MODE);
    }
    o
}

/// `create_dir_all` with [`DIR_MODE`] for every directory it creates.
pub fn create_dir_all_private(path: &Path) -> io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(DIR_MODE);
    }
    b.create(path)
}

/// Write `bytes` to `path` so a reader sees the old file, or the whole new one, never a part:
/// a temporary file beside it ([`FILE_MODE`]), synced, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> crate::error::Result<()> {
    replace(path, bytes).map(drop)
}

/// [`write_atomic`], and the new file, open for appending: the handle is taken before the
/// rename, so a caller that goes on appending never writes to the file it replaced. The
/// directory is synced after the rename, so the new name survives a power cut.
pub fn replace(path: &Path, bytes: &[u8]) -> crate::error::Result<std::fs::File> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    // A leftover of an earlier process with this pid: append mode cannot truncate it.
    let _ = std::fs::remove_file(&tmp);
    let made = options()
        .read(true)
        .append(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()).map(|_| f))
        .and_then(|f| std::fs::rename(&tmp, path).map(|_| f));
    let file = made.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        crate::error::Error::io(&format!("cannot write {}", path.display()), e)
    })?;
    sync_parent(path)?;
    Ok(file)
}

/// Sync the directory that holds `path`, so that a name just made in it (a created or
/// renamed file) survives a power cut: fsyncing a file makes its data durable, not its name.
pub fn sync_parent(path: &Path) -> crate::error::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| crate::error::Error::io(&format!("cannot sync {}", dir.display()), e))
}

/// Open `path` for appending (and reading), creating it with [`FILE_MODE`] if missing, then
/// sync its directory ([`sync_parent`]) before returning it, whether or not this call created
/// it: another process may have created it a moment ago and not synced its name yet, and lines
/// fsynced to the file are only as durable as its name.
pub fn open_append(path: &Path) -> crate::error::Result<std::fs::File> {
    let f = options()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| crate::error::Error::io(&format!("cannot open {}", path.display()), e))?;
    sync_parent(path)?;
    Ok(f)
}
