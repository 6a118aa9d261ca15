//! Slots reused through a free list: where the [`super::Grouper`] keeps pending groups and
//! waiting logical spans. Their indexes and deadlines name a record by its place, so a record
//! never moves while it is held.

#[derive(Debug)]
pub(super) struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    pub(super) fn get(&self, place: u32) -> Option<&T> {
        self.slots.get(place as usize)?.as_ref()
    }

    pub(super) fn get_mut(&mut self, place: u32) -> Option<&mut T> {
        self.slots.get_mut(place as usize)?.as_mut()
    }

    /// Puts `value` in the slot freed last, else in a new one at the end; returns its place and
    /// whether the slot is new.
    pub(super) fn insert(&mut self, value: T) -> (u32, bool) {
        if let Some(place) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(place as usize) {
                *slot = Some(value);
                return (place, false);
            }
        }
        // More held records than `u32::MAX` would be past every cap long before.
        let place = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(Some(value));
        (place, true)
    }

    /// Takes the value out of `place`, which becomes free.
    pub(super) fn remove(&mut self, place: u32) -> Option<T> {
        let value = self.slots.get_mut(place as usize)?.take()?;
        self.free.push(place);
        Some(value)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| Some((u32::try_from(i).ok()?, slot.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_place_is_taken_first_and_the_rest_stay_put() {
        let mut slab = Slab::default();
        assert_eq!(slab.insert('a'), (0, true));
        assert_eq!(slab.insert('b'), (1, true));
        assert_eq!(slab.insert('c'), (2, true));
        assert_eq!(slab.remove(1), Some('b'));
        assert_eq!(slab.remove(1), None);
        assert_eq!(slab.get(1), None);
        assert_eq!(slab.insert('d'), (1, false));
        assert_eq!(slab.insert('e'), (3, true));
        if let Some(c) = slab.get_mut(2) {
            *c = 'C';
        }
        let all: Vec<(u32, char)> = slab.iter().map(|(p, &v)| (p, v)).collect();
        assert_eq!(all, [(0, 'a'), (1, 'd'), (2, 'C'), (3, 'e')]);
    }
}
