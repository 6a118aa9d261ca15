//! Grouping spans into logical requests (SPEC §2, "Grouping").
//!
//! [`Grouper`] holds spans until their request is complete; `replay` feeds it a whole input and
//! drains everything, `serve` drains by time and attempt count. Both produce the same
//! [`Request`]s, which is what makes their rows agree. Model spans, call spans and HTTP tries
//! go through [`infer_trace`] instead, which finds the retries that plain instrumentation shows.

mod assembler;
mod compact;
mod finished;
pub mod infer;
mod pending;
mod plain;
mod seq_ring;
mod slab;
pub mod summary;
mod ticks;
mod waiting;

pub use assembler::{Assembler, AssemblyBounds, Ready};
pub use infer::{infer_trace, TraceSpans};
pub use pending::Place;
pub use summary::{ContextSpan, Summary};

use crate::contract::{SpanFacts, SpanId, SpanKind, TraceId};
use crate::record::AttemptSource;
use compact::PendingAttempt;
use finished::{Finished, FinishedCache, Seq};
use pending::PendingGroups;
use waiting::{LogicalPlace, WaitingLogical, WaitingLogicals};

/// Maps keyed by ids from the wire: a fast keyed hash, still randomised per process so a
/// client cannot choose colliding ids.
pub type FastMap<K, V> = std::collections::HashMap<K, V, ProcessKeys>;
pub type FastSet<K> = std::collections::HashSet<K, ProcessKeys>;

/// ahash keyed once per process. `ahash::RandomState::new()` adds to one atomic counter that
/// every thread shares, and inference makes a dozen small maps per trace: the streams and
/// shards took turns owning that cache line (BENCHMARKS.md, issue 18, sixteenth pass).
#[derive(Debug, Clone)]
pub struct ProcessKeys(ahash::RandomState);

impl Default for ProcessKeys {
    fn default() -> Self {
        static KEYS: std::sync::OnceLock<ahash::RandomState> = std::sync::OnceLock::new();
        ProcessKeys(KEYS.get_or_init(ahash::RandomState::new).clone())
    }
}

impl std::hash::BuildHasher for ProcessKeys {
    type Hasher = ahash::AHasher;

    fn build_hasher(&self) -> ahash::AHasher {
        self.0.build_hasher()
    }
}

/// What one group or finished entry costs beyond the spans it holds: its map slots (at the
/// tables' load factor), the four or five copies of its key in the maps that index it, and
/// the allocator's rounding. An estimate, for the byte budget; measured against RSS in
/// BENCHMARKS.md.
const GROUP_OVERHEAD_BYTES: usize = 512;
const SPAN_ID_BYTES: usize = 16;

/// The driver's numbers for the records spans came from, inclusive (`serve`: its write-ahead
/// log's, where this is `wal::LsnRange`), kept with what is held so the driver learns which
/// records it still needs without maps of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origins {
    pub min: u64,
    pub max: u64,
}

impl Origins {
    pub fn single(origin: u64) -> Origins {
        Origins {
            min: origin,
            max: origin,
        }
    }

    /// The range covering both, when either is known.
    pub fn widen_optional(range: Option<Origins>, other: Option<Origins>) -> Option<Origins> {
        match (range, other) {
            (Some(a), Some(b)) => Some(a.widen(b)),
            (a, b) => a.or(b),
        }
    }

    /// The range covering both.
    pub fn widen(self, other: Origins) -> Origins {
        Origins {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }
}

/// What ties the attempts of one logical request together.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKey {
    /// Attempts carrying `retry_spend.request.id`.
    RequestId {
        trace_id: TraceId,
        /// Shared: the key is copied into every map that indexes a pending request.
        request_id: std::sync::Arc<str>,
    },
    /// Attempts without a request id, grouped under their parent span (none: the whole trace).
    Parent {
        trace_id: TraceId,
        parent_span_id: Option<SpanId>,
    },
    /// A request named by one span's id: a GenAI span with no contract attributes alone, or the
    /// request inferred from it (SPEC §2, "Attempts inferred from plain instrumentation": the
    /// GenAI span of an SDK's retry loop, the first span of a run of failed sibling calls).
    Single { trace_id: TraceId, span_id: SpanId },
}

impl GroupKey {
    /// The group key of an attempt-like span; `None` for logical and passthrough spans.
    pub fn of(span: &SpanFacts) -> Option<GroupKey> {
        match span.kind {
            SpanKind::Attempt => Some(match &span.request_id {
                Some(id) => GroupKey::RequestId {
                    trace_id: span.trace_id,
                    request_id: id.clone(),
                },
                None => GroupKey::Parent {
                    trace_id: span.trace_id,
                    parent_span_id: span.parent_span_id,
                },
            }),
            SpanKind::SingleAttempt | SpanKind::DeclaredSingle => Some(GroupKey::Single {
                trace_id: span.trace_id,
                span_id: span.span_id,
            }),
            SpanKind::LogicalRequest
            | SpanKind::Passthrough
            | SpanKind::HttpTry
            | SpanKind::CallSpan => None,
        }
    }

    /// The `request_id` column: the request id, else the parent span id (else the trace id when
    /// parentless attempts share a trace, else the id of the span that names the request).
    pub fn request_id(&self) -> std::sync::Arc<str> {
        match self {
            GroupKey::RequestId { request_id, .. } => std::sync::Arc::clone(request_id),
            GroupKey::Parent {
                parent_span_id: Some(parent),
                ..
            } => crate::contract::id_hex(parent).into(),
            GroupKey::Parent {
                trace_id,
                parent_span_id: None,
            } => crate::contract::id_hex(trace_id).into(),
            GroupKey::Single { span_id, .. } => crate::contract::id_hex(span_id).into(),
        }
    }

    pub fn trace_id(&self) -> &TraceId {
        match self {
            GroupKey::RequestId { trace_id, .. }
            | GroupKey::Parent { trace_id, .. }
            | GroupKey::Single { trace_id, .. } => trace_id,
        }
    }
}

/// One logical request: its attempts and, when it arrived, its logical request span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub key: GroupKey,
    pub logical: Option<SpanFacts>,
    /// Attempts to write rows for.
    pub attempts: Vec<SpanFacts>,
    /// Attempts of the same request whose rows were already written (a late retry's earlier
    /// attempts): context for the rules, never rows again.
    pub evaluated: Vec<SpanFacts>,
    /// Where the grouping came from: the `attempt_source` column.
    pub attempt_source: AttemptSource,
    /// Inferred requests: the model spans and call spans of their calls, which state the
    /// envelope, task type and policy attributes (SPEC §2); never rows.
    pub sources: Vec<SpanFacts>,
    /// Where its attempts came from (see [`Origins`]); inferred requests' spans are reported
    /// in [`Ready::consumed_origins`] instead.
    pub origins: Option<Origins>,
}

/// A request with more attempts than this is evaluated in parts as they arrive (live), and no
/// more of its attempts are kept as context: no SDK retries that often, and a hostile client
/// must not grow one request's memory without bound.
pub const MAX_ATTEMPTS_PER_REQUEST: usize = 10_000;

/// Spans waiting for their request to be evaluated, and a bounded memory of evaluated ones.
///
/// Like the OpenTelemetry Collector's tail sampler keeps a decision cache, the grouper keeps the
/// attempts of recently evaluated requests: a retry that arrives late is judged with its earlier
/// attempts, and a span an exporter re-sends is recognised and ignored.
#[derive(Debug, Default)]
pub struct Grouper {
    groups: PendingGroups,
    logicals: WaitingLogicals,
    finished: FinishedCache,
    /// Attempts replayed from the write-ahead log whose rows a completed file already holds:
    /// context for their request, never rows again.
    written: FastSet<(TraceId, SpanId)>,
    /// Estimated bytes held by pending groups and waiting logical spans.
    pending_bytes: usize,
    /// Estimated bytes held by the finished-request cache.
    finished_bytes: usize,
    /// Counts every change to the finished cache, so a saved copy knows whether it is current.
    finished_changes: u64,
    /// Attempt ids of finished requests restored from a saved summary and not yet met again in
    /// the replayed write-ahead log (see [`Grouper::unfinish_restored`]).
    restored: FastSet<(TraceId, SpanId)>,
}

/// A request still waiting: its attempts in arrival order.
///
/// The first parent is kept beside the attempts, and past a few attempts a set of their span
/// ids, so that taking one more span costs the same however many the group already holds: a
/// hostile exporter can put any number of attempts in one group, and a scan per span would make
/// that quadratic. Below that the attempts themselves are scanned: a set or list of ids for
/// every held request was a second allocation and a copy of what the attempts hold.
#[derive(Debug, Default)]
struct Group {
    /// Packed: a request without `attempt_count` is held for `group_wait`.
    attempts: Vec<PendingAttempt>,
    /// The attempts' span ids once there are more than [`FEW_SPAN_IDS`].
    many_ids: Option<Box<FastSet<SpanId>>>,
    first_parent: Option<SpanId>,
    /// Estimated; the byte budget takes a group long before 4 GiB (past it, it saturates).
    bytes: u32,
    origins: OriginRange,
}

/// [`Origins`] in 16 bytes, none as an empty range: every pending group keeps one, and an
/// `Option<Origins>` takes 24.
#[derive(Debug, Clone, Copy)]
struct OriginRange {
    min: u64,
    max: u64,
}

impl Default for OriginRange {
    fn default() -> Self {
        OriginRange {
            min: u64::MAX,
            max: 0,
        }
    }
}

impl OriginRange {
    fn add(&mut self, origin: Option<u64>) {
        if let Some(origin) = origin {
            self.min = self.min.min(origin);
            self.max = self.max.max(origin);
        }
    }

    fn get(self) -> Option<Origins> {
        (self.min <= self.max).then_some(Origins {
            min: self.min,
            max: self.max,
        })
    }
}

/// The span ids of one request: a short list for the usual handful of attempts, a set past that
/// (a hostile exporter can put any number of attempts in one request).
#[derive(Debug)]
enum SpanIds {
    Few(Vec<SpanId>),
    Many(Box<FastSet<SpanId>>),
}

impl Group {
    fn holds(&self, id: &SpanId) -> bool {
        match &self.many_ids {
            Some(ids) => ids.contains(id),
            None => self.attempts.iter().any(|a| a.span_id() == *id),
        }
    }

    /// Adds an attempt not held yet.
    fn push(&mut self, attempt: PendingAttempt) {
        if let Some(ids) = &mut self.many_ids {
            ids.insert(attempt.span_id());
        } else if self.attempts.len() >= FEW_SPAN_IDS {
            let mut ids: FastSet<SpanId> = self.attempts.iter().map(|a| a.span_id()).collect();
            ids.insert(attempt.span_id());
            self.many_ids = Some(Box::new(ids));
        }
        self.attempts.push(attempt);
    }
}

impl Default for SpanIds {
    fn default() -> Self {
        SpanIds::Few(Vec::new())
    }
}

/// Past this many ids a linear scan costs more than hashing.
const FEW_SPAN_IDS: usize = 16;

impl SpanIds {
    fn contains(&self, id: &SpanId) -> bool {
        match self {
            SpanIds::Few(ids) => ids.contains(id),
            SpanIds::Many(ids) => ids.contains(id),
        }
    }

    /// Adds `id`; false when it was there already.
    fn insert(&mut self, id: SpanId) -> bool {
        match self {
            SpanIds::Few(ids) if ids.contains(&id) => false,
            SpanIds::Few(ids) if ids.len() < FEW_SPAN_IDS => {
                ids.push(id);
                true
            }
            SpanIds::Few(ids) => {
                let mut set: FastSet<SpanId> = ids.drain(..).collect();
                set.insert(id);
                *self = SpanIds::Many(Box::new(set));
                true
            }
            SpanIds::Many(ids) => ids.insert(id),
        }
    }

    /// The ids of `ids`, which holds no id twice.
    fn distinct(ids: impl ExactSizeIterator<Item = SpanId>) -> SpanIds {
        if ids.len() <= FEW_SPAN_IDS {
            SpanIds::Few(ids.collect())
        } else {
            SpanIds::Many(Box::new(ids.collect()))
        }
    }

    fn len(&self) -> usize {
        match self {
            SpanIds::Few(ids) => ids.len(),
            SpanIds::Many(ids) => ids.len(),
        }
    }

    fn remove(&mut self, id: &SpanId) -> bool {
        match self {
            SpanIds::Few(ids) => {
                let before = ids.len();
                ids.retain(|i| i != id);
                ids.len() < before
            }
            SpanIds::Many(ids) => ids.remove(id),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &SpanId> + '_> {
        match self {
            SpanIds::Few(ids) => Box::new(ids.iter()),
            SpanIds::Many(ids) => Box::new(ids.iter()),
        }
    }
}

/// The group keys a logical span can belong to, in the order they are tried; held inline
/// because every logical span offered asks for them.
#[derive(Debug, Default)]
pub struct LogicalKeys {
    by_request: Option<GroupKey>,
    by_parent: Option<GroupKey>,
}

impl LogicalKeys {
    pub fn iter(&self) -> impl Iterator<Item = &GroupKey> {
        self.by_request.iter().chain(&self.by_parent)
    }
}

/// What [`Grouper::offer_touching`] did with a span.
#[derive(Debug)]
pub(super) struct Offered {
    pub(super) offer: Offer,
    /// The group an attempt joined.
    pub(super) place: Option<Place>,
    /// That group has all its attempts ([`Grouper::is_complete`]).
    pub(super) complete: bool,
    /// A logical span now waits for its attempts ([`Grouper::holds_logical`]), rather than
    /// joining a request already evaluated.
    pub(super) waiting: bool,
}

impl Offered {
    fn not_held(offer: Offer) -> Offered {
        Offered {
            offer,
            place: None,
            complete: false,
            waiting: false,
        }
    }
}

/// What happened to a span offered to the [`Grouper`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Held as an attempt of this group.
    Attempt(GroupKey),
    /// Held as a logical request span.
    Logical,
    /// Already seen (an exporter re-sent its batch): ignored.
    Duplicate,
    /// Not part of the contract.
    Passthrough,
    /// A plain GenAI span held for inference (`serve`; see [`Assembler`]).
    Plain,
    /// An HTTP try held for inference until its GenAI parent is evaluated; it still goes on
    /// untouched at once, whatever inference makes of it.
    HeldTry,
}

impl Grouper {
    /// A grouper that remembers up to `finished_capacity` evaluated requests (0: none).
    pub fn with_finished_capacity(finished_capacity: usize) -> Grouper {
        Grouper {
            finished: FinishedCache::with_capacity(finished_capacity),
            ..Grouper::default()
        }
    }

    pub fn offer(&mut self, span: SpanFacts) -> Offer {
        self.offer_from(span, None)
    }

    /// [`Grouper::offer`] of a span from the driver's record `origin` (see [`Origins`]).
    pub fn offer_from(&mut self, span: SpanFacts, origin: Option<u64>) -> Offer {
        self.offer_touching(span, origin, None).offer
    }

    /// [`Grouper::offer_from`] that, when the span joins a group, records `deadline_seq` (if
    /// any) as the group's latest deadline (see [`Grouper::is_deadline_of`]) and says whether the group
    /// is now complete ([`Grouper::is_complete`]): what the [`Assembler`] asks after every
    /// attempt, answered with the one lookup of the group the offer makes anyway.
    pub(super) fn offer_touching(
        &mut self,
        span: SpanFacts,
        origin: Option<u64>,
        deadline_seq: Option<u64>,
    ) -> Offered {
        let offer = match span.kind {
            SpanKind::Passthrough | SpanKind::HttpTry | SpanKind::CallSpan => Offer::Passthrough,
            SpanKind::LogicalRequest => {
                let (offer, waiting) = self.offer_logical(span, origin);
                return Offered {
                    waiting,
                    ..Offered::not_held(offer)
                };
            }
            SpanKind::Attempt | SpanKind::SingleAttempt | SpanKind::DeclaredSingle => {
                let Some(key) = GroupKey::of(&span) else {
                    return Offered::not_held(Offer::Passthrough);
                };
                let id = span.span_id;
                // One hash of the key serves both the finished cache and the pending groups.
                let hash = self.finished.hash(&key);
                if self
                    .finished
                    .get_hashed(hash, &key)
                    .is_some_and(|f| f.span_ids.contains(&id))
                {
                    return Offered::not_held(Offer::Duplicate);
                }
                // One lookup both checks the pending group for a copy and finds (or makes) it.
                // The key is cloned only into a new group.
                let (place, group, new) = self.groups.find_or_insert(hash, &key, || Group {
                    bytes: GROUP_OVERHEAD_BYTES as u32,
                    ..Group::default()
                });
                if !new && group.holds(&id) {
                    return Offered::not_held(Offer::Duplicate);
                }
                let first_parent = group.first_parent.or(span.parent_span_id);
                let attempt = PendingAttempt::pack(span, &key, first_parent);
                let bytes = attempt.retained_bytes();
                group.bytes = group
                    .bytes
                    .saturating_add(u32::try_from(bytes).unwrap_or(u32::MAX));
                // A request has one to three attempts as a rule: grow by one at first, not to
                // the four slots (512 bytes) a first push reserves.
                if group.attempts.len() == group.attempts.capacity() && group.attempts.len() < 8 {
                    group.attempts.reserve_exact(1);
                }
                self.pending_bytes += bytes
                    + if group.attempts.is_empty() {
                        GROUP_OVERHEAD_BYTES
                    } else {
                        0
                    };
                group.origins.add(origin);
                group.first_parent = first_parent;
                group.push(attempt);
                let complete = Grouper::has_all_attempts(&self.logicals, &key, group);
                if let Some(seq) = deadline_seq {
                    self.groups.set_deadline(place, seq);
                }
                return Offered {
                    offer: Offer::Attempt(key),
                    place: Some(place),
                    complete,
                    waiting: false,
                };
            }
        };
        Offered::not_held(offer)
    }

    /// Offers an attempt whose row is already in a completed file (crash recovery).
    pub fn offer_written(&mut self, span: SpanFacts, origin: Option<u64>) -> Offer {
        self.offer_written_touching(span, origin, None).offer
    }

    /// [`Grouper::offer_written`] as [`Grouper::offer_touching`] offers.
    pub(super) fn offer_written_touching(
        &mut self,
        span: SpanFacts,
        origin: Option<u64>,
        deadline_seq: Option<u64>,
    ) -> Offered {
        let id = (span.trace_id, span.span_id);
        let offered = self.offer_touching(span, origin, deadline_seq);
        if matches!(offered.offer, Offer::Attempt(_)) {
            self.written.insert(id);
        }
        offered
    }

    /// What became of a logical span, and whether it now waits for its attempts.
    fn offer_logical(&mut self, span: SpanFacts, origin: Option<u64>) -> (Offer, bool) {
        let id = (span.trace_id, span.span_id);
        if self.logicals.place_of(&id.0, &id.1).is_some()
            || self.finished.holds_logical(&span.trace_id, &span.span_id)
        {
            return (Offer::Duplicate, false);
        }
        // Its request was already evaluated without it: keep it for late retries' envelope.
        if let Some(seq) = self.finished_seq_for_logical(&span) {
            if let Some(finished) = self.finished.at(seq) {
                if finished.logical.is_none() {
                    let context = ContextSpan::of_logical(span);
                    let bytes = context.retained_bytes();
                    finished.bytes += bytes;
                    finished.logical = Some(Box::new(context));
                    self.finished_bytes += bytes;
                    self.finished_changes += 1;
                    self.finished.add_logical_id(seq, id.1);
                    return (Offer::Logical, false);
                }
            }
        }
        let span = ContextSpan::of_logical(span);
        self.pending_bytes += span.retained_bytes();
        self.logicals.insert(id.0, WaitingLogical { span, origin });
        (Offer::Logical, true)
    }

    /// The finished request a logical span belongs to.
    fn finished_seq_for_logical(&self, span: &SpanFacts) -> Option<Seq> {
        Grouper::keys_for_logical(span)
            .iter()
            .find_map(|k| self.finished.seq_of(k))
    }

    /// The group keys a logical span can belong to: by its request id, or as the attempts' parent.
    pub fn keys_for_logical(span: &SpanFacts) -> LogicalKeys {
        Grouper::logical_keys(span.trace_id, span.span_id, span.request_id.as_ref())
    }

    fn logical_keys(
        trace_id: TraceId,
        span_id: SpanId,
        request_id: Option<&std::sync::Arc<str>>,
    ) -> LogicalKeys {
        LogicalKeys {
            by_request: request_id.map(|request_id| GroupKey::RequestId {
                trace_id,
                request_id: request_id.clone(),
            }),
            by_parent: Some(GroupKey::Parent {
                trace_id,
                parent_span_id: Some(span_id),
            }),
        }
    }

    /// [`Grouper::keys_for_logical`] for a logical span still held, by its ids.
    pub fn keys_for_logical_ids(&self, trace_id: TraceId, span_id: SpanId) -> LogicalKeys {
        match self.logicals.get(&trace_id, &span_id) {
            Some(waiting) => Grouper::logical_keys(trace_id, span_id, waiting.request_id.as_ref()),
            None => LogicalKeys::default(),
        }
    }

    pub fn has_group(&self, key: &GroupKey) -> bool {
        self.place_of(key).is_some()
    }

    /// Where the pending group of `key` is.
    pub fn place_of(&self, key: &GroupKey) -> Option<Place> {
        self.groups.find(self.finished.hash(key), key)
    }

    /// Records the sequence number of the pending group's latest deadline.
    fn set_deadline_seq(&mut self, place: Place, seq: u64) {
        self.groups.set_deadline(place, seq);
    }

    /// Whether `seq` is the latest deadline of the pending group at `place`.
    fn is_deadline_of(&self, place: Place, seq: u64) -> bool {
        self.groups.deadline_of(place) == seq
    }

    /// Drops a logical span whose attempts never came; it makes no row of its own.
    pub fn forget_logical(&mut self, trace_id: TraceId, span_id: SpanId) -> bool {
        let Some(waiting) = self.logicals.remove(&trace_id, &span_id) else {
            return false;
        };
        self.pending_bytes = self
            .pending_bytes
            .saturating_sub(waiting.span.retained_bytes());
        true
    }

    /// Whether this logical span is still waiting for attempts.
    pub fn holds_logical(&self, trace_id: TraceId, span_id: SpanId) -> bool {
        self.logicals.place_of(&trace_id, &span_id).is_some()
    }

    /// Where the group's logical span waits, if it does: the latest registered under its
    /// request id, else the parent of its first attempt that names one (`first_parent`).
    fn logical_of(
        logicals: &WaitingLogicals,
        key: &GroupKey,
        first_parent: Option<SpanId>,
    ) -> Option<LogicalPlace> {
        match key {
            GroupKey::RequestId {
                trace_id,
                request_id,
            } => logicals
                .place_of_request(trace_id, request_id)
                .or_else(|| logicals.place_of(trace_id, &first_parent?)),
            GroupKey::Parent { trace_id, .. } => logicals.place_of(trace_id, &first_parent?),
            GroupKey::Single { .. } => None,
        }
    }

    /// Whether the logical span has arrived and named an attempt count that is now reached. A
    /// plain GenAI span is a request of one attempt by definition: complete on arrival.
    pub fn is_complete(&self, key: &GroupKey) -> bool {
        self.place_of(key)
            .is_some_and(|place| self.is_complete_at(place))
    }

    /// [`Grouper::is_complete`] of the group at `place`.
    fn is_complete_at(&self, place: Place) -> bool {
        self.groups
            .at(place)
            .is_some_and(|p| Grouper::has_all_attempts(&self.logicals, &p.key, &p.group))
    }

    /// [`Grouper::is_complete`] of a pending group.
    fn has_all_attempts(logicals: &WaitingLogicals, key: &GroupKey, group: &Group) -> bool {
        if matches!(key, GroupKey::Single { .. })
            || group.attempts.len() >= MAX_ATTEMPTS_PER_REQUEST
        {
            return true;
        }
        if !logicals.any_counted() {
            return false;
        }
        Grouper::logical_of(logicals, key, group.first_parent)
            .and_then(|place| logicals.at(place))
            .and_then(|l| l.attempt_count)
            .is_some_and(|n| group.attempts.len() >= n as usize)
    }

    /// Removes a group and returns it as a request, with the attempts of the same request that
    /// were evaluated before. Its span ids count as seen from now on; hand the request back to
    /// [`Grouper::finish`] once evaluated so that late retries find its attempts.
    pub fn take(&mut self, key: &GroupKey) -> Option<Request> {
        let place = self.place_of(key)?;
        self.take_at(place)
    }

    /// [`Grouper::take`] of the group at `place`.
    fn take_at(&mut self, place: Place) -> Option<Request> {
        // The slab's own key becomes the request's, rather than a clone of it.
        let pending::Pending {
            key: owned_key,
            group:
                Group {
                    attempts: packed,
                    first_parent,
                    bytes,
                    origins,
                    ..
                },
            ..
        } = self.groups.remove(place)?;
        let key = &owned_key;
        self.pending_bytes = self.pending_bytes.saturating_sub(bytes as usize);
        let mut attempts: Vec<SpanFacts> = packed
            .into_iter()
            .map(|a| a.unpack(key, first_parent))
            .collect();
        let mut logical = Grouper::logical_of(&self.logicals, key, first_parent)
            .and_then(|place| self.logicals.remove_at(place))
            .map(|l| {
                self.pending_bytes = self.pending_bytes.saturating_sub(l.span.retained_bytes());
                l.span.to_facts(*key.trace_id(), SpanKind::LogicalRequest)
            });
        let mut already_written = Vec::new();
        if !self.written.is_empty() {
            let written = &mut self.written;
            let (old, new) = attempts
                .into_iter()
                .partition(|a| written.remove(&(a.trace_id, a.span_id)));
            already_written = old;
            attempts = new;
        }
        let mut evaluated = Vec::new();
        // One lookup finds the request's earlier attempts and makes its finished entry: an
        // entry that is new holds nothing yet.
        if let Some((seq, entry)) = self.finished_entry(key) {
            let trace_id = *key.trace_id();
            let kind = match key {
                GroupKey::Single { .. } => SpanKind::SingleAttempt,
                GroupKey::RequestId { .. } | GroupKey::Parent { .. } => SpanKind::Attempt,
            };
            evaluated = entry
                .attempts
                .iter()
                .map(|a| a.to_facts(trace_id, kind))
                .collect();
            if logical.is_none() {
                logical = entry
                    .logical
                    .as_deref()
                    .map(|l| l.to_facts(trace_id, SpanKind::LogicalRequest));
            }
            // Ids now, so a copy arriving before `finish` is still a duplicate. A new entry
            // holds exactly the attempts' ids, all distinct, in arrival order.
            let before = entry.span_ids.len();
            if before == 0 && already_written.is_empty() {
                entry.span_ids = SpanIds::distinct(attempts.iter().map(|a| a.span_id));
            } else {
                let ids = already_written.iter().chain(&attempts).map(|a| a.span_id);
                for id in ids {
                    entry.span_ids.insert(id);
                }
            }
            let bytes = (entry.span_ids.len() - before) * SPAN_ID_BYTES;
            entry.bytes += bytes;
            self.finished_bytes += bytes;
            self.finished_changes += 1;
            if let Some(l) = &logical {
                self.finished.add_logical_id(seq, l.span_id);
            }
        }
        evaluated.extend(already_written);
        let attempt_source = match key {
            GroupKey::Single { .. } => AttemptSource::Single,
            GroupKey::RequestId { .. } | GroupKey::Parent { .. } => AttemptSource::Declared,
        };
        Some(Request {
            key: owned_key,
            logical,
            attempts,
            evaluated,
            attempt_source,
            sources: Vec::new(),
            origins: origins.get(),
        })
    }

    /// Remembers an evaluated request: its attempts and logical span move into the finished
    /// cache (no copy), where late retries and re-sent spans are checked against them.
    pub fn finish(&mut self, request: Request) {
        let Some((seq, entry)) = self.finished_entry(&request.key) else {
            return;
        };
        let known = entry.attempts.len();
        let new_context = request.evaluated.into_iter().skip(known);
        let room = MAX_ATTEMPTS_PER_REQUEST.saturating_sub(known);
        let mut bytes = 0;
        let added: Vec<ContextSpan> = new_context
            .chain(request.attempts)
            .take(room)
            .map(|attempt| {
                let context = ContextSpan::of_attempt(attempt);
                bytes += context.retained_bytes();
                context
            })
            .collect();
        if entry.attempts.is_empty() {
            // Exactly as many slots as attempts: most finished requests never grow again.
            entry.attempts = added;
        } else {
            entry.attempts.extend(added);
        }
        let mut logical_id = None;
        if entry.logical.is_none() {
            if let Some(logical) = request.logical {
                logical_id = Some(logical.span_id);
                let context = ContextSpan::of_logical(logical);
                bytes += context.retained_bytes();
                entry.logical = Some(Box::new(context));
            }
        }
        entry.bytes += bytes;
        self.finished_bytes += bytes;
        self.finished_changes += 1;
        if let Some(id) = logical_id {
            // Known since `take` unless the entry was evicted and made again in between.
            self.finished.add_logical_id(seq, id);
        }
    }

    /// Forgets the oldest evaluated request; `false` when none is left. Its late retries will
    /// be judged without it (`first_attempt_missing`), so this is what a tight budget costs.
    pub fn evict_finished(&mut self) -> bool {
        let Some(gone) = self.finished.evict_oldest() else {
            return false;
        };
        self.finished_bytes = self.finished_bytes.saturating_sub(gone.bytes);
        self.finished_changes += 1;
        true
    }

    /// How many times the finished cache has changed: equal counts, equal contents.
    pub fn finished_changes(&self) -> u64 {
        self.finished_changes
    }

    /// The finished cache as a summaries file ([`summary`]), oldest request first. Requests
    /// named by one plain span are left out: no later retry can join them.
    pub fn encode_finished(&self) -> summary::Encoded {
        let mut encoder = summary::Encoder::with_capacity(self.finished.len());
        let mut others = Vec::new();
        for (key, finished) in self.finished.iter() {
            if matches!(key, GroupKey::Single { .. }) {
                continue;
            }
            others.clear();
            if finished.span_ids.len() > finished.attempts.len() {
                let kept: FastSet<SpanId> = finished.attempts.iter().map(|a| a.span_id).collect();
                others.extend(finished.span_ids.iter().filter(|id| !kept.contains(*id)));
            }
            encoder.push(
                key,
                finished.logical.as_deref(),
                &finished.attempts,
                &others,
            );
        }
        encoder.finish()
    }

    /// Takes back a finished request saved before a restart, as the newest entry of the cache
    /// (so give them oldest first). A request already known gains the attempts it lacks.
    pub fn restore(&mut self, summary: Summary) {
        let Summary {
            key,
            logical,
            attempts,
            other_span_ids,
        } = summary;
        let trace_id = *key.trace_id();
        let Some((seq, entry)) = self.finished_entry(&key) else {
            return;
        };
        let mut bytes = 0;
        let mut restored = Vec::new();
        for attempt in attempts {
            if entry.span_ids.insert(attempt.span_id) {
                bytes += SPAN_ID_BYTES;
                restored.push(attempt.span_id);
                if entry.attempts.len() < MAX_ATTEMPTS_PER_REQUEST {
                    bytes += attempt.retained_bytes();
                    entry.attempts.push(attempt);
                }
            }
        }
        for id in other_span_ids {
            if entry.span_ids.insert(id) {
                bytes += SPAN_ID_BYTES;
                restored.push(id);
            }
        }
        let mut logical_id = None;
        if entry.logical.is_none() {
            if let Some(logical) = logical {
                bytes += logical.retained_bytes();
                logical_id = Some(logical.span_id);
                entry.logical = Some(Box::new(logical));
            }
        }
        entry.bytes += bytes;
        self.finished_bytes += bytes;
        self.finished_changes += 1;
        if let Some(id) = logical_id {
            self.finished.add_logical_id(seq, id);
        }
        self.restored
            .extend(restored.into_iter().map(|id| (trace_id, id)));
    }

    /// Before a span replayed from the write-ahead log is offered: if it is an attempt of a
    /// restored request, its row never reached a completed file (else it would be offered as
    /// written), so it leaves the finished context and becomes a pending attempt again. A
    /// restored summary may be newer than the files; the log, not the summary, says what
    /// still needs a row.
    pub fn unfinish_restored(&mut self, span: &SpanFacts) {
        if self.restored.is_empty() || !self.restored.remove(&(span.trace_id, span.span_id)) {
            return;
        }
        let Some(key) = GroupKey::of(span) else {
            return;
        };
        let Some((_, entry)) = self.finished.get_mut(&key) else {
            return;
        };
        let mut bytes = 0;
        if entry.span_ids.remove(&span.span_id) {
            bytes += SPAN_ID_BYTES;
        }
        if let Some(i) = entry
            .attempts
            .iter()
            .position(|a| a.span_id == span.span_id)
        {
            bytes += entry.attempts.remove(i).retained_bytes();
        }
        entry.bytes = entry.bytes.saturating_sub(bytes);
        self.finished_bytes = self.finished_bytes.saturating_sub(bytes);
        self.finished_changes += 1;
    }

    /// The write-ahead log is replayed: restored attempts not met in it stay finished context.
    pub fn end_recovery(&mut self) {
        self.restored = FastSet::default();
    }

    /// Estimated bytes held for pending requests.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Estimated bytes held by the finished-request cache.
    pub fn finished_bytes(&self) -> usize {
        self.finished_bytes
    }

    /// The finished-cache entry of `key`, made (evicting the oldest) if new; `None` when the
    /// cache is off.
    fn finished_entry(&mut self, key: &GroupKey) -> Option<(Seq, &mut Finished)> {
        let (bytes, changes) = (&mut self.finished_bytes, &mut self.finished_changes);
        let (seq, new) = self.finished.entry(key, |gone| {
            *bytes = bytes.saturating_sub(gone.bytes);
            *changes += 1;
        })?;
        let entry = self.finished.at(seq)?;
        if new {
            entry.bytes = GROUP_OVERHEAD_BYTES;
            self.finished_bytes += GROUP_OVERHEAD_BYTES;
            self.finished_changes += 1;
        }
        Some((seq, entry))
    }

    /// Every group, in key order so output is deterministic whatever the arrival order.
    pub fn drain_all(&mut self) -> Vec<Request> {
        let mut places: Vec<(&GroupKey, Place)> = self
            .groups
            .iter()
            .map(|(place, p)| (&p.key, place))
            .collect();
        places.sort_unstable();
        let places: Vec<Place> = places.into_iter().map(|(_, place)| place).collect();
        places
            .into_iter()
            .filter_map(|place| self.take_at(place))
            .collect()
    }

    pub fn pending_groups(&self) -> usize {
        self.groups.len()
    }

    /// The oldest record (see [`Origins`]) a pending group or waiting logical span came from.
    pub fn oldest_origin(&self) -> Option<u64> {
        let groups = self
            .groups
            .iter()
            .filter_map(|(_, p)| p.group.origins.get().map(|o| o.min));
        let logical = self.logicals.origins();
        groups.chain(logical).min()
    }

    /// Logical spans still waiting for attempts.
    pub fn pending_logical(&self) -> usize {
        self.logicals.len()
    }
}

#[cfg(test)]
mod tests;
