//! The inbox index: what listing, searching and opening a message need of every delivery in
//! the log, kept in memory so no request re-reads the log. Built from the log at start (the same
//! lines `read_lines` keeps: a torn last line is skipped), appended to by the journal writer
//! after each group's fsync and before the group is answered, emptied by a clear and remapped by
//! a delete. Each entry holds the line's byte offset and length: a page of messages reads just
//! its lines, through a read-only handle on the log. Bodies, HTML and raw SMTP bytes stay in the
//! file; only a text body of up to `TEXT_KEPT` bytes is kept (lower-cased) for free-text search.
//! Mailpit's read flags and tags live here too, in memory only.

use super::inbox::Filter;
use super::tenants::view;
use sendonce_core::provider::deliverylog::DeliveryLine;
use sendonce_domain::error::{Error, Result};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Text bodies up to this many bytes are kept (lower-cased) for free-text search; a longer one
/// is read from its line when a search gets to it.
pub(crate) const TEXT_KEPT: usize = 2048;
/// Adjacent lines are read from the log in one read of at most this many bytes.
const READ_SPAN: u64 = 1 << 20;

/// The strings of an entry, packed in one allocation: these are their slots.
#[derive(Clone, Copy)]
enum S {
    Id,
    Channel,
    Job,
    /// The line's `to`.
    To,
    /// The SMTP envelope's recipients, one a line.
    Rcpts,
    From,
    /// The SMTP envelope's reverse path.
    EnvFrom,
    ToLc,
    FromLc,
    SubjectLc,
    /// Empty when the text is longer than `TEXT_KEPT` (`long_text`).
    TextLc,
    /// Mailpit's addresses as its search reads them, lower-cased: To; From; Cc and Bcc.
    MpTo,
    MpFrom,
    MpOther,
    /// The tenant it is filed in (empty: none).
    Tenant,
}
const SLOTS: usize = 15;

/// One delivery line of the log.
pub(crate) struct Entry {
    offset: u64,
    len: u32,
    pub(crate) at: i64,
    pub(crate) replay: bool,
    long_text: bool,
    /// Bytes of the message received over SMTP; `None` for HTTP deliveries.
    pub(crate) smtp_size: Option<u32>,
    /// Mailpit's read flag.
    pub(crate) read: bool,
    /// Mailpit's tags, sorted, once each.
    pub(crate) tags: Box<[Box<str>]>,
    strs: Box<str>,
    ends: [u32; SLOTS],
}

impl Entry {
    pub(crate) fn of(l: &DeliveryLine, offset: u64, len: u32) -> Entry {
        let [mp_to, mp_from, mp_other] = super::mailpit::search_fields(l);
        let long_text = l.body.len() > TEXT_KEPT;
        let rcpts = l.envelope.as_ref().map(|e| e.to.join("\n"));
        let env_from = l.envelope.as_ref().map(|e| e.from.as_str());
        let from = l.from.as_deref().unwrap_or("");
        let parts: [Cow<str>; SLOTS] = [
            l.message_id.as_str().into(),
            l.channel.as_str().into(),
            l.job_id.as_str().into(),
            l.to.as_str().into(),
            rcpts.unwrap_or_default().into(),
            from.into(),
            env_from.unwrap_or("").into(),
            l.to.to_lowercase().into(),
            from.to_lowercase().into(),
            l.subject.as_deref().unwrap_or("").to_lowercase().into(),
            if long_text {
                "".into()
            } else {
                l.body.to_lowercase().into()
            },
            mp_to.into(),
            mp_from.into(),
            mp_other.into(),
            l.tenant.as_deref().unwrap_or("").into(),
        ];
        let mut strs = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0u32; SLOTS];
        for (i, p) in parts.iter().enumerate() {
            strs.push_str(p);
            ends[i] = strs.len() as u32;
        }
        Entry {
            offset,
            len,
            at: l.at,
            replay: l.replay,
            long_text,
            smtp_size: l.raw_base64.as_deref().map(|b| decoded_len(b) as u32),
            read: false,
            tags: Box::new([]),
            strs: strs.into_boxed_str(),
            ends,
        }
    }

    fn s(&self, slot: S) -> &str {
        let i = slot as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.strs.get(start..self.ends[i] as usize).unwrap_or("")
    }

    pub(crate) fn id(&self) -> &str {
        self.s(S::Id)
    }
    pub(crate) fn mp_to(&self) -> &str {
        self.s(S::MpTo)
    }
    pub(crate) fn mp_from(&self) -> &str {
        self.s(S::MpFrom)
    }
    pub(crate) fn mp_other(&self) -> &str {
        self.s(S::MpOther)
    }
    pub(crate) fn subject_lc(&self) -> &str {
        self.s(S::SubjectLc)
    }
    /// Whether a request in `view` (`tenants::view`, read once per scan) sees it: always, but
    /// in a tenant's view only that tenant's.
    pub(crate) fn visible(&self, view: Option<&str>) -> bool {
        view.is_none_or(|v| self.s(S::Tenant) == v)
    }

    /// Every recipient: the line's `to` and the envelope's.
    fn recipients(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.s(S::To)).chain(self.s(S::Rcpts).split('\n').filter(|r| !r.is_empty()))
    }

    /// Heap bytes this entry holds.
    fn heap_bytes(&self) -> usize {
        self.strs.len() + self.tags.iter().map(|t| t.len() + 16).sum::<usize>()
    }
}

/// Bytes a standard base64 text decodes to.
fn decoded_len(b64: &str) -> usize {
    let pad = b64.bytes().rev().take_while(|c| *c == b'=').count();
    (b64.len() / 4 * 3).saturating_sub(pad)
}

/// A lower-cased text to find in many others, its searcher built once.
#[derive(Debug, Clone)]
pub(crate) struct Needle(memchr::memmem::Finder<'static>);

impl Needle {
    /// `s` lower-cased.
    pub(crate) fn new(s: &str) -> Needle {
        Needle(memchr::memmem::Finder::new(s.to_lowercase().as_bytes()).into_owned())
    }

    /// `hay.contains(needle)` (bytes of UTF-8 found in UTF-8 always start on a character).
    pub(crate) fn is_in(&self, hay: &str) -> bool {
        self.0.find(hay.as_bytes()).is_some()
    }
}

/// A filter made ready for many entries: its texts lower-cased once.
struct Compiled<'f> {
    f: &'f Filter,
    subject: Option<Needle>,
    text: Option<Needle>,
    /// The request's tenant view (`tenants::view`), read once per scan.
    view: Option<String>,
}

/// The index and the log it describes.
pub(crate) struct State {
    entries: Vec<Entry>,
    /// Message id -> the delivery's entry (never a replay's).
    by_id: HashMap<Box<str>, u32>,
    /// Recipient (ASCII lower-case) -> entries, oldest first.
    by_to: HashMap<Box<str>, Vec<u32>>,
    /// Job id -> entries, oldest first.
    by_job: HashMap<Box<str>, Vec<u32>>,
    /// Deliveries that are not replays.
    live: usize,
    /// Read-only, for the lines a request shows.
    file: Arc<File>,
    path: PathBuf,
    /// Where the next line starts.
    end: u64,
}

/// The shared index, behind a lock: the journal writer writes, requests read.
pub(crate) struct Index {
    state: RwLock<State>,
}

impl Index {
    /// Read the whole log once; `each` sees every line kept (the journal relearns keys there).
    pub(crate) fn build(path: &Path, each: impl FnMut(&DeliveryLine)) -> Result<Index> {
        Ok(Index {
            state: RwLock::new(State::build(path, each)?),
        })
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn open_read(path: &Path) -> Result<Arc<File>> {
    File::open(path)
        .map(Arc::new)
        .map_err(|e| Error::io(&format!("cannot open {}", path.display()), e))
}

impl State {
    fn build(path: &Path, mut each: impl FnMut(&DeliveryLine)) -> Result<State> {
        let file = open_read(path)?;
        let mut st = State {
            entries: Vec::new(),
            by_id: HashMap::new(),
            by_to: HashMap::new(),
            by_job: HashMap::new(),
            live: 0,
            file: file.clone(),
            path: path.to_path_buf(),
            end: 0,
        };
        let ctx = || format!("cannot read {}", path.display());
        let mut r = std::io::BufReader::with_capacity(1 << 20, &*file);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = r
                .read_until(b'\n', &mut buf)
                .map_err(|e| Error::io(&ctx(), e))?;
            if n == 0 {
                break;
            }
            let offset = st.end;
            let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
            // As read_lines: a line that does not parse (torn, foreign) is skipped.
            if let Ok(l) = serde_json::from_slice::<DeliveryLine>(body) {
                each(&l);
                st.push(Entry::of(&l, offset, n as u32));
            }
            st.end = offset + n as u64;
        }
        Ok(st)
    }

    /// Read the log again from scratch (after a failed write left it in doubt).
    pub(crate) fn rebuild(&mut self) -> Result<()> {
        let mut fresh = State::build(&self.path, |_| {})?;
        // Marks survive, by message id.
        for e in &self.entries {
            if let Some(&i) = fresh.by_id.get(e.id()) {
                let f = &mut fresh.entries[i as usize];
                f.read = e.read;
                f.tags = e.tags.clone();
            }
        }
        *self = fresh;
        Ok(())
    }

    /// Where the next appended line starts.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Add the entry of a line just made durable at `e.offset`.
    pub(crate) fn push(&mut self, e: Entry) {
        let i = self.entries.len() as u32;
        self.end = self.end.max(e.offset + u64::from(e.len));
        if !e.replay {
            self.live += 1;
            self.by_id.entry(e.id().into()).or_insert(i);
        }
        let mut seen: Vec<String> = Vec::new();
        for r in e.recipients() {
            let key = r.to_ascii_lowercase();
            if !seen.contains(&key) {
                self.by_to.entry(key.as_str().into()).or_default().push(i);
                seen.push(key);
            }
        }
        self.by_job.entry(e.s(S::Job).into()).or_default().push(i);
        self.entries.push(e);
    }

    /// The log was emptied.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.by_id.clear();
        self.by_to.clear();
        self.by_job.clear();
        self.live = 0;
        self.end = 0;
    }

    /// Deliveries that are not replays (in a tenant's view, that tenant's).
    pub(crate) fn live(&self) -> usize {
        match super::tenants::view() {
            None => self.live,
            Some(_) => self.newest().count(),
        }
    }

    pub(crate) fn entry(&self, i: u32) -> &Entry {
        &self.entries[i as usize]
    }

    /// The delivery with this id (never a replay), when this request sees it.
    pub(crate) fn find(&self, id: &str) -> Option<u32> {
        self.by_id
            .get(id)
            .copied()
            .filter(|&i| self.entries[i as usize].visible(view().as_deref()))
    }

    /// Every delivery that is not a replay and that this request sees, newest first.
    pub(crate) fn newest(&self) -> impl Iterator<Item = u32> + '_ {
        let view = view();
        (0..self.entries.len() as u32).rev().filter(move |&i| {
            let e = &self.entries[i as usize];
            !e.replay && e.visible(view.as_deref())
        })
    }

    /// The entries a filter keeps, newest first: through the recipient or job map when the
    /// filter names one, else every entry.
    pub(crate) fn select<'a>(&'a self, f: &'a Filter) -> impl Iterator<Item = u32> + 'a {
        let c = Compiled {
            f,
            subject: f.subject.as_deref().map(Needle::new),
            text: f.text.as_deref().map(Needle::new),
            view: view(),
        };
        let list =
            |m: &'a HashMap<Box<str>, Vec<u32>>, k: &str| -> Box<dyn Iterator<Item = u32> + 'a> {
                match m.get(k) {
                    Some(v) => Box::new(v.iter().rev().copied()),
                    None => Box::new(std::iter::empty()),
                }
            };
        let candidates: Box<dyn Iterator<Item = u32> + 'a> = match (&f.to, &f.job_id) {
            (Some(to), _) => list(&self.by_to, &to.to_ascii_lowercase()),
            (None, Some(job)) => list(&self.by_job, job),
            (None, None) => Box::new((0..self.entries.len() as u32).rev()),
        };
        candidates.filter(move |&i| self.matches(&c, &self.entries[i as usize]))
    }

    /// `Filter::matches` on an entry.
    fn matches(&self, c: &Compiled, e: &Entry) -> bool {
        let f = c.f;
        let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        e.visible(c.view.as_deref())
            && (f.replays || !e.replay)
            && f.to
                .as_deref()
                .is_none_or(|t| e.recipients().any(|r| same(r, t)))
            && f.from
                .as_deref()
                .is_none_or(|x| same(e.s(S::From), x) || same(e.s(S::EnvFrom), x))
            && c.subject.as_ref().is_none_or(|s| s.is_in(e.subject_lc()))
            && f.job_id.as_deref().is_none_or(|j| e.s(S::Job) == j)
            && f.channel.as_deref().is_none_or(|ch| e.s(S::Channel) == ch)
            && f.since.is_none_or(|t| e.at >= t)
            && c.text.as_ref().is_none_or(|q| {
                q.is_in(e.s(S::ToLc))
                    || q.is_in(e.s(S::FromLc))
                    || q.is_in(e.subject_lc())
                    || q.is_in(&self.text_lc(e))
            })
    }

    /// The text body, lower-cased: kept, or read from the log when longer than `TEXT_KEPT`.
    pub(crate) fn text_lc<'e>(&self, e: &'e Entry) -> Cow<'e, str> {
        if !e.long_text {
            return Cow::Borrowed(e.s(S::TextLc));
        }
        let line = self.picks([e]).load().pop();
        Cow::Owned(line.map(|f| f.line.body.to_lowercase()).unwrap_or_default())
    }

    /// The lines of these entries, to read after the lock is let go.
    pub(crate) fn picks<'e>(&self, entries: impl IntoIterator<Item = &'e Entry>) -> Picks {
        Picks {
            file: self.file.clone(),
            items: entries
                .into_iter()
                .map(|e| Pick {
                    offset: e.offset,
                    len: e.len,
                    id: e.id().to_string(),
                    replay: e.replay,
                    read: e.read,
                    tags: e.tags.iter().map(|t| t.to_string()).collect(),
                })
                .collect(),
        }
    }

    /// [`State::picks`] by position.
    pub(crate) fn picks_at(&self, at: &[u32]) -> Picks {
        self.picks(at.iter().map(|&i| self.entry(i)))
    }

    /// Mark deliveries read or unread: these ids, or all when `None`. How many changed.
    pub(crate) fn set_read(&mut self, ids: Option<&[String]>, read: bool) -> usize {
        let at = self.positions(ids);
        let mut n = 0;
        for i in at {
            let e = &mut self.entries[i as usize];
            n += usize::from(e.read != read);
            e.read = read;
        }
        n
    }

    /// Replace the tags of these deliveries (`tags` already cleaned).
    pub(crate) fn set_tags(&mut self, ids: &[String], tags: &[String]) {
        let mut tags: Vec<Box<str>> = tags.iter().map(|t| t.as_str().into()).collect();
        tags.sort_by_key(|t| t.to_lowercase());
        tags.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        for i in self.positions(Some(ids)) {
            self.entries[i as usize].tags = tags.clone().into_boxed_slice();
        }
    }

    /// Rename a tag (case-insensitive) on every delivery, or remove it (`to: None`).
    pub(crate) fn retag(&mut self, from: &str, to: Option<&str>) {
        for e in self.entries.iter_mut().filter(|e| !e.tags.is_empty()) {
            if !e.tags.iter().any(|t| t.eq_ignore_ascii_case(from)) {
                continue;
            }
            let mut tags: Vec<Box<str>> = e
                .tags
                .iter()
                .filter(|t| !t.eq_ignore_ascii_case(from))
                .cloned()
                .collect();
            if let Some(to) = to {
                if !tags.iter().any(|t| t.eq_ignore_ascii_case(to)) {
                    tags.push(to.into());
                }
            }
            tags.sort_by_key(|t| t.to_lowercase());
            e.tags = tags.into_boxed_slice();
        }
    }

    /// Every tag in use, with how many deliveries carry it, by name.
    pub(crate) fn tag_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        let view = view();
        for e in self
            .entries
            .iter()
            .filter(|e| !e.replay && e.visible(view.as_deref()))
        {
            for t in e.tags.iter() {
                *out.entry(t.to_string()).or_insert(0) += 1;
            }
        }
        out
    }

    /// Every tag in use, sorted as Mailpit lists them (case aside).
    pub(crate) fn tag_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tag_counts().into_keys().collect();
        names.sort_by_key(|t| t.to_lowercase());
        names
    }

    /// Deliveries not marked read.
    pub(crate) fn unread(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| !e.replay && !e.read && e.visible(view().as_deref()))
            .count()
    }

    /// The deliveries with these ids (all, when `None`).
    fn positions(&self, ids: Option<&[String]>) -> Vec<u32> {
        match ids {
            None => self.newest().collect(),
            Some(ids) => ids.iter().filter_map(|id| self.find(id)).collect(),
        }
    }

    /// The entries' count and heap bytes (the index's own size, maps included roughly).
    pub(crate) fn size(&self) -> (usize, usize) {
        let entries: usize = self
            .entries
            .iter()
            .map(|e| std::mem::size_of::<Entry>() + e.heap_bytes())
            .sum();
        let keys = |m: &HashMap<Box<str>, Vec<u32>>| -> usize {
            m.iter().map(|(k, v)| k.len() + 40 + v.capacity() * 4).sum()
        };
        let ids: usize = self.by_id.keys().map(|k| k.len() + 28).sum();
        (
            self.entries.len(),
            entries + keys(&self.by_to) + keys(&self.by_job) + ids,
        )
    }

    /// The log without the deliveries (and replays) of these ids, made from the log's bytes
    /// and the entries' offsets; `None` when none is there. Lines not indexed (torn, foreign)
    /// are kept as they are.
    pub(crate) fn without(&self, log: &[u8], ids: &[String]) -> Option<Removal> {
        let gone: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        let mut kept = Vec::with_capacity(log.len());
        let mut offsets = Vec::with_capacity(self.entries.len());
        let (mut at, mut removed) = (0usize, 0usize);
        for e in &self.entries {
            let (start, end) = (e.offset as usize, (e.offset + u64::from(e.len)) as usize);
            kept.extend_from_slice(log.get(at..start)?);
            if gone.contains(e.id()) {
                removed += usize::from(!e.replay);
                offsets.push(None);
            } else {
                offsets.push(Some(kept.len() as u64));
                kept.extend_from_slice(log.get(start..end)?);
            }
            at = end;
        }
        kept.extend_from_slice(log.get(at..)?);
        (removed > 0).then_some(Removal {
            kept,
            offsets,
            removed,
        })
    }

    /// The log was replaced by `r.kept`: drop the removed entries, move the others.
    pub(crate) fn removed(&mut self, r: Removal) -> Result<()> {
        let file = open_read(&self.path)?;
        let old = std::mem::take(&mut self.entries);
        self.clear();
        self.file = file;
        for (mut e, offset) in old.into_iter().zip(r.offsets) {
            if let Some(o) = offset {
                e.offset = o;
                self.push(e);
            }
        }
        self.end = r.kept.len() as u64;
        Ok(())
    }
}

/// What a delete leaves: the new log's bytes, each entry's new offset (`None`: removed).
pub(crate) struct Removal {
    pub(crate) kept: Vec<u8>,
    offsets: Vec<Option<u64>>,
    pub(crate) removed: usize,
}

/// Lines to read from the log.
pub(crate) struct Picks {
    file: Arc<File>,
    items: Vec<Pick>,
}

struct Pick {
    offset: u64,
    len: u32,
    id: String,
    replay: bool,
    read: bool,
    tags: Vec<String>,
}

/// A delivery read back from the log, with its Mailpit marks.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub line: DeliveryLine,
    pub read: bool,
    pub tags: Vec<String>,
}

impl Picks {
    /// Read and parse the lines, in the order picked. Adjacent lines are read together. A line
    /// that is no longer the one picked (the log was cleared or rewritten meanwhile) is left
    /// out: that delivery is gone.
    pub(crate) fn load(self) -> Vec<Found> {
        let mut order: Vec<usize> = (0..self.items.len()).collect();
        order.sort_by_key(|&i| self.items[i].offset);
        let mut lines: Vec<Option<DeliveryLine>> = vec![None; self.items.len()];
        let mut k = 0;
        while k < order.len() {
            // A run of lines that follow each other in the file, read at once.
            let first = &self.items[order[k]];
            let mut end = first.offset + u64::from(first.len);
            let mut run = k + 1;
            while run < order.len() {
                let p = &self.items[order[run]];
                if p.offset != end || p.offset + u64::from(p.len) - first.offset > READ_SPAN {
                    break;
                }
                end = p.offset + u64::from(p.len);
                run += 1;
            }
            let mut buf = vec![0u8; (end - first.offset) as usize];
            if read_at(&self.file, &mut buf, first.offset).is_ok() {
                for &i in &order[k..run] {
                    let p = &self.items[i];
                    let from = (p.offset - first.offset) as usize;
                    let bytes = &buf[from..from + p.len as usize];
                    lines[i] = serde_json::from_slice::<DeliveryLine>(bytes)
                        .ok()
                        .filter(|l| l.message_id == p.id && l.replay == p.replay);
                }
            }
            k = run;
        }
        self.items
            .into_iter()
            .zip(lines)
            .filter_map(|(p, l)| {
                Some(Found {
                    line: l?,
                    read: p.read,
                    tags: p.tags,
                })
            })
            .collect()
    }
}

#[cfg(unix)]
fn read_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(windows)]
fn read_at(f: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(f, buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// Random delivery lines for the tests that compare the index with a full scan of the log.
#[cfg(test)]
pub(crate) mod testing {
    use base64::Engine;
    use sendonce_core::provider::deliverylog::{DeliveryLine, Envelope};

    /// xorshift64*: the same lines for the same seed.
    pub(crate) struct Rand(u64);

    impl Rand {
        pub(crate) fn new(seed: u64) -> Rand {
            Rand(seed.max(1))
        }
        pub(crate) fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
        }
        pub(crate) fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len())]
        }
    }

    pub(crate) const RECIPIENTS: &[&str] = &[
        "kim@example.org",
        "KIM@Example.org",
        "lee@example.org",
        "+14155550100",
        "zoë@example.org",
    ];
    pub(crate) const FROMS: &[&str] = &[
        "",
        "news@example.com",
        "Shop <shop@example.org>",
        "NEWS@example.com",
    ];
    pub(crate) const SUBJECTS: &[&str] = &["", "Welcome Kim", "Your INVOICE", "Ölfarbe sale"];
    pub(crate) const WORDS: &[&str] = &["hello", "Kim", "invoice", "ÖL", "confirm", "zz-needle"];

    /// A text of a few words, or one longer than `TEXT_KEPT` ending in a word.
    fn body(r: &mut Rand) -> String {
        let mut s: Vec<&str> = (0..1 + r.below(4)).map(|_| r.pick(WORDS)).collect();
        if r.below(5) == 0 {
            let filler = "lorem ipsum ".repeat(super::TEXT_KEPT / 8);
            let last = r.pick(WORDS);
            return format!("{} {filler} {last}", s.join(" "));
        }
        s.push("https://x.example/u");
        s.join(" ")
    }

    /// A message received over SMTP: its envelope and exact bytes.
    fn smtp(r: &mut Rand, l: &mut DeliveryLine) {
        let to: Vec<String> = (0..1 + r.below(3))
            .map(|_| r.pick(RECIPIENTS).to_string())
            .collect();
        let cc = r.pick(RECIPIENTS);
        let raw = format!(
            "From: \"Shop, K.\" <shop@example.org>\r\nTo: {}\r\nCc: {cc}\r\nSubject: {}\r\n\r\n{}\r\n",
            to[0],
            l.subject.clone().unwrap_or_default(),
            l.body
        );
        l.to = to[0].clone();
        l.envelope = Some(Envelope {
            from: r.pick(&["", "bounce@example.org"]).into(),
            to,
        });
        l.raw_base64 = Some(base64::engine::general_purpose::STANDARD.encode(raw));
    }

    pub(crate) fn lines(seed: u64, n: usize) -> Vec<DeliveryLine> {
        let mut r = Rand::new(seed);
        let mut out: Vec<DeliveryLine> = Vec::new();
        for i in 0..n {
            let some = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
            let replay = !out.is_empty() && r.below(6) == 0;
            let mut l = DeliveryLine {
                job_id: r.pick(&["j1", "j2", ""]).into(),
                idempotency_key: format!("k{i}"),
                channel: r.pick(&["email", "email", "sms"]).into(),
                from: some(r.pick(FROMS)),
                to: r.pick(RECIPIENTS).into(),
                subject: some(r.pick(SUBJECTS)),
                body: body(&mut r),
                html: None,
                reply_to: None,
                at: 1_000 + i as i64 * 10,
                replay,
                message_id: format!("fake-{i}"),
                metadata: None,
                api: None,
                headers: None,
                raw_base64: None,
                envelope: None,
                attachments: Vec::new(),
                tenant: None,
            };
            if replay {
                let first = &out[r.below(out.len())];
                l.message_id = first.message_id.clone();
            } else if l.channel == "email" && r.below(3) == 0 {
                smtp(&mut r, &mut l);
            }
            out.push(l);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{self, Rand};
    use super::*;
    use sendonce_core::provider::deliverylog::read_lines;

    /// A log of these lines with a foreign line in the middle and a torn last line.
    fn write_log(path: &Path, lines: &[DeliveryLine]) {
        let mut bytes = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            bytes.extend(serde_json::to_vec(l).unwrap());
            bytes.push(b'\n');
            if i == lines.len() / 2 {
                bytes.extend_from_slice(b"{\"not\": \"a delivery\"}\n");
            }
        }
        bytes.extend_from_slice(br#"{"job_id":"torn","idempotency_key":"#);
        std::fs::write(path, bytes).unwrap();
    }

    fn random_filter(r: &mut Rand) -> Filter {
        let mut maybe =
            |p: usize, from: &[&str]| (r.below(p) == 0).then(|| r.pick(from).to_string());
        let mut f = Filter {
            to: maybe(3, testing::RECIPIENTS),
            from: maybe(
                5,
                &["news@example.com", "shop@example.org", "bounce@EXAMPLE.org"],
            ),
            subject: maybe(4, &["kim", "INVOICE", "öl", "welcome k"]),
            job_id: maybe(4, &["j1", "j2", ""]),
            channel: maybe(4, &["email", "sms"]),
            since: None,
            text: maybe(3, &["kim", "ZZ-NEEDLE", "öl", "example", "invoice"]),
            replays: false,
        };
        f.since = (r.below(4) == 0).then(|| 1_000 + r.below(3000) as i64);
        f.replays = r.below(3) == 0;
        if f.job_id.as_deref() == Some("") {
            f.job_id = None;
        }
        f
    }

    /// The index answers every filter as a full scan of the log does, and reads back the same
    /// lines.
    fn agrees(st: &State, path: &Path, r: &mut Rand, rounds: usize) {
        let all = read_lines(path).unwrap();
        assert_eq!(st.entries.len(), all.len());
        for _ in 0..rounds {
            let f = random_filter(r);
            let want: Vec<&DeliveryLine> = all.iter().rev().filter(|l| f.matches(l)).collect();
            let at: Vec<u32> = st.select(&f).collect();
            let got = st.picks_at(&at).load();
            let got: Vec<&DeliveryLine> = got.iter().map(|f| &f.line).collect();
            assert_eq!(got, want, "{f:?}");
        }
    }

    #[test]
    fn the_index_agrees_with_a_full_scan_for_random_filters() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut r = Rand::new(7);
        for seed in 1..=4 {
            write_log(&path, &testing::lines(seed, 300));
            let mut st = Index::build(&path, |_| {})
                .unwrap()
                .state
                .into_inner()
                .unwrap();
            agrees(&st, &path, &mut r, 300);
            // Find: the delivery, never a replay.
            let all = read_lines(&path).unwrap();
            for l in all.iter().filter(|l| !l.replay).take(20) {
                let i = st.find(&l.message_id).unwrap();
                assert_eq!(st.picks_at(&[i]).load()[0].line, *l);
            }
            // A delete rewrites the log from the entries' offsets: still the same answers.
            let ids: Vec<String> = all
                .iter()
                .step_by(7)
                .map(|l| l.message_id.clone())
                .collect();
            let bytes = std::fs::read(&path).unwrap();
            let removal = st.without(&bytes, &ids).unwrap();
            std::fs::write(&path, &removal.kept).unwrap();
            st.removed(removal).unwrap();
            assert!(read_lines(&path)
                .unwrap()
                .iter()
                .all(|l| !ids.contains(&l.message_id)));
            agrees(&st, &path, &mut r, 100);
            // The foreign and torn lines were kept as they were.
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.contains("{\"not\": \"a delivery\"}\n")
                    && text.ends_with("\"idempotency_key\":")
            );
        }
    }

    #[test]
    fn marks_follow_ids_and_survive_a_delete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        write_log(&path, &testing::lines(3, 40));
        let mut st = Index::build(&path, |_| {})
            .unwrap()
            .state
            .into_inner()
            .unwrap();
        let ids: Vec<String> = st
            .newest()
            .take(3)
            .map(|i| st.entry(i).id().to_string())
            .collect();
        assert_eq!(st.set_read(Some(&ids[..2]), true), 2);
        assert_eq!(st.unread(), st.live() - 2);
        st.set_tags(&ids[1..], &["b".into(), "A".into(), "a".into()]);
        assert_eq!(
            st.tag_counts().into_iter().collect::<Vec<_>>(),
            [("A".into(), 2), ("b".into(), 2)]
        );
        st.retag("a", Some("Big"));
        st.retag("B", None);
        let bytes = std::fs::read(&path).unwrap();
        let removal = st.without(&bytes, &ids[2..]).unwrap();
        std::fs::write(&path, &removal.kept).unwrap();
        st.removed(removal).unwrap();
        let e = st.entry(st.find(&ids[1]).unwrap());
        assert!(e.read);
        assert_eq!(&*e.tags, [Box::from("Big")]);
        assert_eq!(st.set_read(None, false), 2);
        assert_eq!(st.unread(), st.live());
    }
}
