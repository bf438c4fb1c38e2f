//! ONNX Runtime's CPU memory arena, simulated: what a network's tensors cost when they come from it.
//!
//! ONNX Runtime's CPU execution provider takes every tensor a run writes (and its kernels' scratch) from a
//! best-fit arena with coalescing (`BFCArena`, on by default), which grows by whole regions from the heap and
//! never gives one back while the session lives. So the heap a run needs is not its live tensors at the peak
//! but the regions the arena had to reserve to hold them, and those grow in powers of two: the first region is
//! 1 MiB, each later one twice the one before, and a request larger than the next region makes that region the
//! smallest power of two that holds it (without doubling after it). Each region also costs a table of chunk
//! handles, one 8-byte handle per 256 bytes (1/32 of its size). Measured on one x86 machine with ONNX Runtime
//! 1.32, the first run of each of 22 CNNs took, beyond what the built session held, 3.10, 4.15, 7.25, 8.26,
//! 10.36, 12.39, 16.5 or 33.1 MiB: 3, 4, 7, 8, 10, 12, 16 and 32 MiB of regions with their tables, where their
//! live tensors at the peak came to 3-46 MiB in no such steps.
//!
//! The simulation follows `onnxruntime/core/framework/bfc_arena.cc`: requests rounded up to 256 bytes; the
//! smallest free chunk that fits (the lowest region and offset on a tie); a chunk split only when it is at least
//! twice the request or would leave at least 128 MiB unused (else the request takes all of it); a freed chunk
//! merged with free neighbours in its own region; a new region only when no free chunk fits, regions doubling
//! up to 1 GiB and staying there. It is given the allocations of the liveness walk
//! ([`super::memory`]) in order, which is how ONNX Runtime's sequential executor allocates on a first run
//! (later runs allocate one block planned from the first, from the same regions).

/// How an arena grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaConfig {
    /// The first region, bytes.
    pub initial_region_bytes: u64,
    /// Regions stop doubling at this size (a larger request still gets a region that holds it).
    pub max_doubling_bytes: u64,
    /// Every request is rounded up to a multiple of this.
    pub min_allocation_bytes: u64,
    /// A chunk is split when it would otherwise leave this many bytes unused, however small the request.
    pub max_dead_bytes: u64,
    /// Heap bytes of bookkeeping per region byte, as a divisor (32: one 8-byte handle per 256 bytes).
    pub table_divisor: u64,
}

impl ArenaConfig {
    /// ONNX Runtime's defaults (`OrtArenaCfg` unset: `kNextPowerOfTwo`, 1 MiB first, doubling up to 1 GiB).
    pub const ONNXRUNTIME: ArenaConfig = ArenaConfig {
        initial_region_bytes: 1 << 20,
        max_doubling_bytes: 1 << 30,
        min_allocation_bytes: 256,
        max_dead_bytes: 128 << 20,
        table_divisor: 32,
    };
}

#[derive(Debug, Clone, Copy)]
struct Chunk {
    size: u64,
    /// The allocation holding it, `None` when free.
    owner: Option<usize>,
}

/// An arena's regions and chunks.
#[derive(Debug, Clone)]
pub struct Arena {
    config: ArenaConfig,
    /// Each region's chunks in address order (they cover it).
    regions: Vec<Vec<Chunk>>,
    region_bytes: u64,
    /// The size of the next region when a request fits in it.
    next_region: u64,
}

impl Arena {
    pub fn new(config: ArenaConfig) -> Arena {
        Arena { config, regions: Vec::new(), region_bytes: 0, next_region: config.initial_region_bytes.max(1) }
    }

    /// The heap the arena holds: its regions and their tables.
    pub fn reserved_bytes(&self) -> u64 {
        self.region_bytes + self.region_bytes / self.config.table_divisor.max(1)
    }

    /// Allocate `bytes` for allocation `id` (an id not currently held); nothing for 0 bytes.
    pub fn alloc(&mut self, id: usize, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let unit = self.config.min_allocation_bytes.max(1);
        let rounded = bytes.div_ceil(unit).saturating_mul(unit);
        let best = self
            .regions
            .iter()
            .enumerate()
            .flat_map(|(r, chunks)| chunks.iter().enumerate().map(move |(c, chunk)| (r, c, *chunk)))
            .filter(|(_, _, chunk)| chunk.owner.is_none() && chunk.size >= rounded)
            .min_by_key(|(r, c, chunk)| (chunk.size, *r, *c));
        let (r, c) = match best {
            Some((r, c, _)) => (r, c),
            None => (self.extend(rounded), 0),
        };
        let chunks = &mut self.regions[r];
        let size = chunks[c].size;
        if size >= rounded.saturating_mul(2) || size - rounded >= self.config.max_dead_bytes {
            chunks[c] = Chunk { size: rounded, owner: Some(id) };
            chunks.insert(c + 1, Chunk { size: size - rounded, owner: None });
        } else {
            chunks[c].owner = Some(id);
        }
    }

    /// Free allocation `id` (nothing if it holds nothing), merging it with free neighbours.
    pub fn free(&mut self, id: usize) {
        for chunks in &mut self.regions {
            let Some(c) = chunks.iter().position(|chunk| chunk.owner == Some(id)) else { continue };
            chunks[c].owner = None;
            if c + 1 < chunks.len() && chunks[c + 1].owner.is_none() {
                chunks[c].size += chunks.remove(c + 1).size;
            }
            if c > 0 && chunks[c - 1].owner.is_none() {
                let merged = chunks.remove(c).size;
                chunks[c - 1].size += merged;
            }
            return;
        }
    }

    /// A new region for a request of `rounded` bytes; its index.
    fn extend(&mut self, rounded: u64) -> usize {
        let mut increased = false;
        while rounded > self.next_region {
            self.next_region = self.next_region.saturating_mul(2);
            increased = true;
        }
        let size = self.next_region;
        if !increased {
            let doubled = self.next_region.saturating_mul(2);
            self.next_region =
                if doubled < self.config.max_doubling_bytes { doubled } else { self.config.max_doubling_bytes };
        }
        self.regions.push(vec![Chunk { size, owner: None }]);
        self.region_bytes += size;
        self.regions.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn regions(arena: &Arena) -> Vec<u64> {
        arena.regions.iter().map(|chunks| chunks.iter().map(|c| c.size).sum()).collect()
    }

    #[test]
    fn regions_double_and_a_large_request_gets_the_power_of_two_that_holds_it() {
        let mut a = Arena::new(ArenaConfig::ONNXRUNTIME);
        assert_eq!(a.reserved_bytes(), 0);
        a.alloc(0, 100);
        assert_eq!(regions(&a), [MIB]);
        // 300 KiB more still fit the first region; 1 MiB does not: a second region of 2 MiB.
        a.alloc(1, 300 << 10);
        a.alloc(2, MIB);
        assert_eq!(regions(&a), [MIB, 2 * MIB]);
        // 5 MiB is beyond the next region (4 MiB): 8 MiB, and the one after stays 8 MiB.
        a.alloc(3, 5 * MIB);
        a.alloc(4, 7 * MIB);
        assert_eq!(regions(&a), [MIB, 2 * MIB, 8 * MIB, 8 * MIB]);
        assert_eq!(a.reserved_bytes(), 19 * MIB + 19 * MIB / 32);
    }

    #[test]
    fn a_freed_chunk_is_reused_best_fit_and_split_only_when_twice_the_request() {
        let mut a = Arena::new(ArenaConfig::ONNXRUNTIME);
        a.alloc(0, 600 << 10);
        a.free(0);
        // The free 1 MiB region takes 600 KiB whole (it is less than twice that), so 300 KiB needs a region.
        a.alloc(1, 600 << 10);
        a.alloc(2, 300 << 10);
        assert_eq!(regions(&a), [MIB, 2 * MIB]);
        assert_eq!(a.regions[0].len(), 1, "taken whole");
        // Freed neighbours merge: after freeing everything each region is one free chunk again.
        a.alloc(3, 100 << 10);
        for id in 1..=3 {
            a.free(id);
        }
        assert!(a.regions.iter().all(|chunks| chunks.len() == 1 && chunks[0].owner.is_none()));
        // Best fit, not first fit: of a free 1 MiB region and a free 300 KiB chunk, 200 KiB takes the smaller.
        let mut c = Arena::new(ArenaConfig::ONNXRUNTIME);
        c.alloc(0, 600 << 10);
        c.alloc(1, 300 << 10);
        c.alloc(2, 1700 << 10);
        c.free(0);
        c.free(1);
        c.alloc(3, 200 << 10);
        assert_eq!(regions(&c), [MIB, 2 * MIB]);
        assert!(c.regions[0].iter().all(|chunk| chunk.owner.is_none()), "{:?}", c.regions);
        assert_eq!(c.regions[1][0].owner, Some(3));
        // Requests round up to 256 bytes: 4 x 1 byte fill 4 chunks of 256.
        let mut b = Arena::new(ArenaConfig::ONNXRUNTIME);
        for id in 0..4 {
            b.alloc(id, 1);
        }
        assert_eq!(b.regions[0].iter().filter(|c| c.owner.is_some()).map(|c| c.size).sum::<u64>(), 1024);
    }
}
