use super::*;

fn key(n: u32) -> GroupKey {
    let mut trace_id = [0; 16];
    trace_id[..4].copy_from_slice(&n.to_be_bytes());
    GroupKey::Parent {
        trace_id,
        parent_span_id: Some([1; 8]),
    }
}

fn span_id(n: u32) -> SpanId {
    let mut id = [0; 8];
    id[4..].copy_from_slice(&n.to_be_bytes());
    id
}

/// Makes `key`'s entry, forgetting nothing: the caller keeps within the capacity.
fn make(cache: &mut FinishedCache, key: &GroupKey) -> Seq {
    let (seq, new) = cache
        .entry(key, |_| panic!("nothing is evicted within the capacity"))
        .expect("the cache is on");
    assert!(new);
    seq
}

#[test]
fn the_oldest_request_is_forgotten_first_and_only_it() {
    let mut cache = FinishedCache::with_capacity(3);
    for n in 0..3 {
        let seq = make(&mut cache, &key(n));
        cache.at(seq).expect("just made").bytes = n as usize;
    }
    let mut forgotten = Vec::new();
    let (_, new) = cache
        .entry(&key(3), |gone| forgotten.push(gone.bytes))
        .expect("on");
    assert!(new);
    assert_eq!(forgotten, [0], "the oldest, and one");
    assert!(!cache.contains(&key(0)));
    for n in 1..4 {
        assert!(cache.contains(&key(n)), "request {n} is still known");
    }
    let order: Vec<_> = cache.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(order, [key(1), key(2), key(3)]);
}

#[test]
fn an_entry_made_again_is_found_and_stale_positions_never_match() {
    let mut cache = FinishedCache::with_capacity(2);
    let old = make(&mut cache, &key(0));
    assert!(cache.evict_oldest().is_some());
    assert!(cache.at(old).is_none(), "an evicted position names nothing");
    let (again, new) = cache.entry(&key(0), |_| {}).expect("on");
    assert!(new);
    assert_ne!(again, old);
    assert_eq!(cache.entry(&key(0), |_| {}).expect("on"), (again, false));
    assert_eq!(cache.len(), 1);
}

#[test]
fn the_index_stays_bounded_and_exact_through_many_evictions() {
    const CAPACITY: u32 = 100;
    let mut cache = FinishedCache::with_capacity(CAPACITY as usize);
    let mut forgotten = 0;
    for n in 0..20 * (CAPACITY + SWEEP_SLACK as u32) {
        let (seq, new) = cache.entry(&key(n), |_| forgotten += 1).expect("on");
        assert!(new);
        cache.add_logical_id(seq, span_id(n));
        assert!(cache.by_key.len() <= 2 * CAPACITY as usize + SWEEP_SLACK + 1);
        assert!(cache.by_logical.len() <= 2 * CAPACITY as usize + SWEEP_SLACK + 1);
    }
    let last = 20 * (CAPACITY + SWEEP_SLACK as u32) - 1;
    assert_eq!(forgotten, last + 1 - CAPACITY);
    for n in last + 1 - CAPACITY..=last {
        assert!(cache.contains(&key(n)));
        assert!(cache.holds_logical(key(n).trace_id(), &span_id(n)));
    }
    for n in [0, last - CAPACITY] {
        assert!(!cache.contains(&key(n)), "request {n} was forgotten");
        assert!(!cache.holds_logical(key(n).trace_id(), &span_id(n)));
    }
}

#[test]
fn a_logical_span_is_known_by_its_trace_and_id_until_its_request_is_forgotten() {
    let mut cache = FinishedCache::with_capacity(4);
    let seq = make(&mut cache, &key(1));
    cache.add_logical_id(seq, span_id(7));
    cache.add_logical_id(seq, span_id(7));
    cache.add_logical_id(seq, span_id(8));
    assert_eq!(cache.live_logical, 2, "an id added twice counts once");
    assert!(cache.holds_logical(key(1).trace_id(), &span_id(7)));
    assert!(cache.holds_logical(key(1).trace_id(), &span_id(8)));
    assert!(
        !cache.holds_logical(key(2).trace_id(), &span_id(7)),
        "the same span id in another trace is another span"
    );
    assert!(cache.evict_oldest().is_some());
    assert_eq!(cache.live_logical, 0);
    assert!(!cache.holds_logical(key(1).trace_id(), &span_id(7)));
    assert!(!cache.holds_logical(key(1).trace_id(), &span_id(8)));
}

#[test]
fn an_off_cache_makes_nothing() {
    let mut cache = FinishedCache::default();
    assert!(cache.entry(&key(0), |_| {}).is_none());
    assert_eq!(cache.len(), 0);
    assert!(cache.evict_oldest().is_none());
}
