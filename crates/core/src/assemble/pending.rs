//! The pending groups of a [`super::Grouper`]: a slab of groups and an index of slab places.
//!
//! A keyed map held each group in its slots, and every deadline carried a clone of its key.
//! Each deadline that came due (most of them stale: every attempt sets one) then hashed that
//! key and compared it, text and all, against entries gone cold since. Here a deadline names
//! the place it was set for and is checked against a dense array of sequence numbers; the
//! index is a table of `(hash, place)` pairs (BENCHMARKS.md, issue 18, twelfth pass).

use hashbrown::HashTable;

use super::slab::Slab;
use super::{Group, GroupKey};

/// A pending group's place in the slab, valid until the group is taken. A place is reused
/// afterwards, so whoever keeps one checks it against something the group holds (the
/// [`super::Assembler`] checks its deadline's sequence number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place(u32);

#[derive(Debug)]
pub(super) struct Pending {
    pub(super) key: GroupKey,
    pub(super) group: Group,
    hash: u64,
}

#[derive(Debug, Default)]
pub(super) struct PendingGroups {
    /// Places, by the hash of their key. The hash is in the slab beside the key: an entry of
    /// four bytes, not sixteen, and a table that grows reads the slab for it.
    index: HashTable<u32>,
    slab: Slab<Pending>,
    /// Each place's latest deadline (see [`PendingGroups::deadline_of`]), beside the slab: a
    /// deadline checked when it comes due reads eight bytes, not the group.
    deadlines: Vec<u64>,
}

impl PendingGroups {
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// The place of the group of `key`, whose hash is `hash`.
    pub(super) fn find(&self, hash: u64, key: &GroupKey) -> Option<Place> {
        self.index
            .find(hash, |&place| {
                self.at(Place(place))
                    .is_some_and(|p| p.hash == hash && p.key == *key)
            })
            .map(|&place| Place(place))
    }

    /// The sequence number of the latest deadline of the group at `place`; 0 when it has none
    /// or the place is free.
    pub(super) fn deadline_of(&self, place: Place) -> u64 {
        self.deadlines.get(place.0 as usize).copied().unwrap_or(0)
    }

    pub(super) fn set_deadline(&mut self, place: Place, seq: u64) {
        if let Some(deadline) = self.deadlines.get_mut(place.0 as usize) {
            *deadline = seq;
        }
    }

    pub(super) fn at(&self, place: Place) -> Option<&Pending> {
        self.slab.get(place.0)
    }

    /// The group of `key`, made with `make` when there is none; true when it is new.
    pub(super) fn find_or_insert(
        &mut self,
        hash: u64,
        key: &GroupKey,
        make: impl FnOnce() -> Group,
    ) -> (Place, &mut Group, bool) {
        let (place, new) = match self.find(hash, key) {
            Some(place) => (place, false),
            None => (self.insert(hash, key.clone(), make()), true),
        };
        let group = match self.slab.get_mut(place.0) {
            Some(pending) => &mut pending.group,
            // `find` and `insert` return only occupied places.
            _ => unreachable!("a pending group's place is occupied"),
        };
        (place, group, new)
    }

    fn insert(&mut self, hash: u64, key: GroupKey, group: Group) -> Place {
        let (place, new) = self.slab.insert(Pending { key, group, hash });
        if new {
            self.deadlines.push(0);
        }
        let slab = &self.slab;
        // Every place indexed holds its group: it leaves the index when the group is taken.
        self.index
            .insert_unique(hash, place, |&p| slab.get(p).map_or(0, |e| e.hash));
        Place(place)
    }

    /// Takes the group out of `place`, which becomes free.
    pub(super) fn remove(&mut self, place: Place) -> Option<Pending> {
        let pending = self.slab.remove(place.0)?;
        self.set_deadline(place, 0);
        if let Ok(entry) = self.index.find_entry(pending.hash, |&p| p == place.0) {
            entry.remove();
        }
        Some(pending)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (Place, &Pending)> {
        self.slab.iter().map(|(place, p)| (Place(place), p))
    }
}
